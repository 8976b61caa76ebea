"""How much memory vLLM's CPU build may take for its KV cache, chosen before anything starts.

On a CPU, vLLM reserves `gpu_memory_utilization` of the machine's RAM (its default, 0.9, fails beside any
other job). Instead the run gives it an explicit KV cache (`kv_cache_memory_bytes`): room for every
sequence of a full batch at `max_model_len`, capped by what is free once the learner and the engine's
own weights have their share, and never below one sequence of `max_model_len` (vLLM refuses that).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs

from unstable_core.errors import ConfigError

GIB = 1 << 30
# a CPU learner's peak memory per byte of fp32 weights: SmolLM2-135M (0.54 GB) peaked at 4.5-4.9 GB, weights,
# LoRA, Adam, activations of a 16-step update and packed copies of the frozen layers included
LEARNER_PER_WEIGHT_BYTE = 9.0
# per engine beyond weights and KV cache: vLLM's worker (1.8 GB measured beside a 5.5 GB cache) and the
# inference actor holding its client (1.5 GB)
ENGINE_OVERHEAD = 3 * GIB
MARGIN = 1 * GIB  # left free for the driver, Ray and the collectors
RAY_KILL_FRACTION = 0.95  # Ray's memory monitor kills workers above this share of the machine's memory


@attrs.frozen
class KvCachePlan:
    """The KV cache given to vLLM on a CPU, and the figures it was chosen from (bytes)."""

    kv_cache_bytes: int
    wanted: int  # a full batch at max_model_len
    floor: int  # one sequence at max_model_len
    available: int
    learner: int
    engine: int
    reserve: int  # kept free: the margin, and the memory above Ray's kill line

    def describe(self) -> str:
        return (
            f"vLLM KV cache {self.kv_cache_bytes / GIB:.2f} GiB on the CPU (a full batch wants "
            f"{self.wanted / GIB:.2f}; free {self.available / GIB:.1f} GiB, learner {self.learner / GIB:.1f}, "
            f"engine {self.engine / GIB:.1f})"
        )


def kv_bytes_per_token(folder: str | os.PathLike, dtype_bytes: int) -> int:
    """Keys and values of one token over every layer, from the model folder's config.json."""
    config = json.loads((Path(folder) / "config.json").read_text())
    config = config.get("text_config", config)
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * dtype_bytes


def weight_bytes(folder: str | os.PathLike) -> int:
    """Bytes of the model's weights on disk (safetensors, else PyTorch bin files)."""
    files = list(Path(folder).glob("*.safetensors")) or list(Path(folder).glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def available_memory() -> int:
    """Memory the system can give without swapping (Linux MemAvailable; psutil elsewhere)."""
    return _meminfo("MemAvailable:", "available")


def total_memory() -> int:
    """The machine's memory (Linux MemTotal; psutil elsewhere)."""
    return _meminfo("MemTotal:", "total")


def _meminfo(key: str, field: str) -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return int(getattr(psutil.virtual_memory(), field))


def plan_kv_cache(
    folder: str | os.PathLike,
    *,
    dtype_bytes: int,
    max_batch_size: int,
    max_model_len: int,
    engines: int = 1,
    learner_on_cpu: bool = True,
    available: int | None = None,
    total: int | None = None,
) -> KvCachePlan:
    """The KV cache of each of `engines` vLLM engines on this machine's CPU; ConfigError, naming the fix,
    when not even one sequence of `max_model_len` fits beside the learner."""
    per_token = kv_bytes_per_token(folder, dtype_bytes)
    weights = weight_bytes(folder)
    available = available_memory() if available is None else available
    learner = int(LEARNER_PER_WEIGHT_BYTE * weights) if learner_on_cpu else 0
    engine = weights + ENGINE_OVERHEAD
    total = total_memory() if total is None else total
    reserve = MARGIN + int((1 - RAY_KILL_FRACTION) * total)
    share = (available - learner - reserve) // max(engines, 1) - engine
    wanted = per_token * max_model_len * max_batch_size
    floor = per_token * max_model_len
    if share < floor:
        raise ConfigError(
            f"vLLM on the CPU needs {(floor + engine) / GIB:.1f} GiB per engine (one sequence of max_model_len "
            f"{max_model_len} and the weights), and {available / GIB:.1f} GiB are free"
            + (f", {learner / GIB:.1f} of them for the learner" if learner else "")
            + ": lower --max-model-len or --num-inference-actors, free memory, or set "
            "vllm_config.kv_cache_memory_bytes"
        )
    return KvCachePlan(min(wanted, share), wanted, floor, available, learner, engine, reserve)


def model_kv_cache(
    model: str,
    *,
    dtype: str = "float32",
    max_batch_size: int,
    max_model_len: int,
    engines: int = 1,
    learner_on_cpu: bool = True,
) -> KvCachePlan:
    """`plan_kv_cache` for a model by name (its Hugging Face folder, made once) in the engine's `dtype`:
    what `unstable run` and `unstable eval` give vLLM on a CPU."""
    from unstable_core.model_loading import hf_model_folder

    return plan_kv_cache(
        hf_model_folder(model),
        dtype_bytes=4 if dtype == "float32" else 2,
        max_batch_size=max_batch_size,
        max_model_len=max_model_len,
        engines=engines,
        learner_on_cpu=learner_on_cpu,
    )
