"""Overhead of `learner.update(batch)` against a plain forward/backward/AdamW loop on the same batch.

All run on the same LoRA model with the same micro-batching and clipping; the plain loops get their
micro-batches pre-collated, so the ratio counts all of the learner's bookkeeping. Target: <= 1.15.
A second plain loop with the naive full-vocabulary log-softmax is timed for reference.

Then the update's FLOP/s against the fp32 matmul peak, the learner's counterpart of the rollout benchmark's
row a'): the FLOPs of one update counted from the model's shapes and the batch's real tokens
(`learner_flops.py` says what counts) over the median update above, against the faster of torch.matmul
and oneDNN's packed linear at [rows, H] x [H, H] and [rows, H] x [H, I] (rows: a micro-batch's tokens, as
each of the update's matmuls has them), measured with the same threads before and after the timed
updates; then where the time goes: a few more updates with timers on their phases (collation, decoder
forward, LM head, log-softmax, backward, checkpointing's recompute, gradient sum, clipping, AdamW), each
phase's median share and, where it does matmuls, its own FLOP/s.

    python benchmarks/learner.py                        # tiny random model (seconds)
    python benchmarks/learner.py --model smollm2-135m   # the embedded default
    python benchmarks/learner.py --learner-workers 2    # one update by 1 worker against 2 (gloo)
    python benchmarks/learner.py --profile              # and torch.profiler's top ops of an update

With `--learner-workers N` it times one update by one worker against N data-parallel workers (gloo on this
CPU, the cores split between them), counts the bytes all-reduced per update, and works out the efficiency
that NCCL at `--link-gbps` would give a Qwen3-1.7B LoRA rank-32 update (`data_parallel_arithmetic`).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling helper modules, also when imported

from learner_flops import arch_of, learner_flops, matmul_peaks, phase_seconds, report, top_ops  # noqa: E402

from unstable_core.cli.options import add_config_argument  # noqa: E402

TARGET_RATIO = 1.15


def make_batch(n: int, prompt_len: int, completion_len: int, vocab: int, seed: int) -> list[Any]:
    """`n` steps with random token ids and lengths within +-25% of the given ones."""
    from unstable_core.types import Step

    rng = random.Random(seed)

    def length(mean: int) -> int:
        return max(1, rng.randint(mean * 3 // 4, mean * 5 // 4))

    return [
        Step(
            pid=i % 2,
            env_id="bench",
            obs="",
            act="",
            prompt_ids=[rng.randrange(vocab) for _ in range(length(prompt_len))],
            completion_ids=[rng.randrange(vocab) for _ in range(length(completion_len))],
            reward=rng.choice([-1.0, 1.0]),
        )
        for i in range(n)
    ]


def plain_update(
    learner: Any, optimizer: Any, micro_batches: list[tuple[Any, Any]], n: int, full_vocab: bool
) -> None:
    """The minimal loop: forward, REINFORCE loss, backward per micro-batch; clip; AdamW step.

    full_vocab=False does the learner's maths (log-softmax at completion positions only), so the ratio
    is pure bookkeeping overhead; full_vocab=True is the naive log-softmax over every position.
    """
    import torch

    for tokens, advantages in micro_batches:
        logits = learner.model(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask).logits
        mask = tokens.target_mask  # [B, T-1]
        if full_vocab:
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # [B, T-1, V]
            logp = logp.gather(-1, tokens.input_ids[:, 1:, None]).squeeze(-1) * mask  # [B, T-1]
        else:
            rows = torch.log_softmax(logits[:, :-1][mask].float(), dim=-1)  # [N, V]
            picked = rows.gather(-1, tokens.input_ids[:, 1:][mask][:, None]).squeeze(-1)  # [N]
            logp = torch.zeros(mask.shape, device=picked.device).masked_scatter(mask, picked)  # [B, T-1]
        loss = (-advantages * logp.sum(-1) / learner.config.max_generation_len).mean()
        (loss * len(advantages) / n).backward()
    params = [p for g in optimizer.param_groups for p in g["params"]]
    torch.nn.utils.clip_grad_norm_(params, learner.config.gradient_clipping)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def sync(device: Any) -> None:
    """Wait for queued CUDA work, so wall-clock times are real."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed_updates(learner: Any, batch: list[Any], repeats: int) -> dict[str, float]:
    """`repeats` + 1 updates (the first warms up): their median wall time after the first, and the bytes one
    all_reduce moves."""
    from unstable_core.learners.data_parallel import GradientSum

    times = []
    for _ in range(repeats + 1):
        if learner.data_parallel is not None:
            learner.data_parallel.broadcast(None)  # the ranks start each update together
        start = time.perf_counter()
        learner.update(batch)
        times.append(time.perf_counter() - start)
    reduced = GradientSum(learner.trainable_parameters()).total
    return {
        "update_s": statistics.median(times[1:]),
        "all_reduce_bytes": reduced.numel() * reduced.element_size(),
    }


def _dp_worker(group: Any, rank: int, spec: dict[str, Any], repeats: int, out: Any) -> None:
    """One rank of the timed data-parallel group; rank 0 reports the timing."""
    import torch

    from unstable_core import plugins

    torch.set_num_threads(spec["threads"])
    learner = plugins.load("learner", "reinforce").create(
        spec["model"], run_dir=spec["run_dir"], **spec["settings"]
    )
    learner.initialize_algorithm()
    result = group.run(learner, rank, lambda ranked: _timed_updates(ranked, spec["batch"], repeats))
    if rank == 0:
        out.put(result)


def time_workers(world: int, spec: dict[str, Any], repeats: int, cores: int) -> dict[str, float]:
    """Median seconds of one update by `world` spawned workers with cores // world threads each."""
    import multiprocessing

    from unstable_core.learners.data_parallel import LearnerGroup, wait_for

    out = multiprocessing.get_context("spawn").Queue()
    spec = {**spec, "threads": max(1, cores // world)}
    procs = LearnerGroup.here(world).spawn(_dp_worker, spec, repeats, out)
    result = out.get(timeout=1800)
    wait_for(procs)
    return result


def data_parallel_arithmetic(
    workers: int, link_gbps: float, tokens_per_rank: int, tflops: float, mfu: float
) -> dict[str, float]:
    """What N data-parallel workers would spend on one update of Qwen3-1.7B with LoRA rank 32 on GPUs: the
    compute of a frozen-base LoRA step with gradient checkpointing (forward 2PT, recompute 2PT, backward
    through the activations 2PT; the LoRA weight gradients are negligible), against a ring all-reduce of the
    float64 gradient sum (2 (N - 1) / N of its bytes per rank over the link), not overlapped."""
    from memory_arithmetic import QWEN3, base_params, lora_params

    arch = QWEN3["Qwen3-1.7B"]
    params = base_params(arch)
    compute_s = 6 * params * tokens_per_rank / (tflops * 1e12 * mfu)
    grad_bytes = lora_params(arch, 32) * 8
    comm_s = 2 * (workers - 1) / workers * grad_bytes / (link_gbps * 1e9)
    return {
        "compute_s": compute_s,
        "all_reduce_bytes": grad_bytes,
        "all_reduce_s": comm_s,
        "efficiency": compute_s / (compute_s + comm_s),
    }


def data_parallel_report(args: Any, model: str, tmp: str) -> None:
    """Print one update's time by 1 worker and by N, the bytes all-reduced, and the NCCL arithmetic."""
    import os

    cores = args.threads or os.cpu_count() or 1
    spec = {
        "model": model,
        "run_dir": f"{tmp}/run",
        "settings": {
            "batch_size": args.batch_size,
            "mini_batch_size": args.mini_batch_size,
            "max_generation_len": args.completion_len * 2,
            "gradient_checkpointing": not args.no_checkpointing,
            "device": "cpu",
        },
        "batch": make_batch(args.batch_size, args.prompt_len, args.completion_len, 49152, seed=0),
    }
    one = time_workers(1, spec, args.repeats, cores)
    many = time_workers(args.learner_workers, spec, args.repeats, cores)
    n = args.learner_workers
    print(
        f"model={args.model or 'tiny'} device=cpu (gloo) batch={args.batch_size} micro={args.mini_batch_size} "
        f"prompt~{args.prompt_len} completion~{args.completion_len} repeats={args.repeats} cores={cores}"
    )
    print(f"one update, 1 worker  ({cores} threads):        {one['update_s'] * 1000:9.1f} ms")
    print(f"one update, {n} workers ({max(1, cores // n)} thread(s) each): {many['update_s'] * 1000:9.1f} ms")
    print(
        f"speed-up on these {cores} cores: {one['update_s'] / many['update_s']:.2f}x (the cores are shared: not the target)"
    )
    print(
        f"bytes all-reduced per update: {many['all_reduce_bytes']:,} (the float64 gradient sum of the LoRA)"
    )
    gpu = data_parallel_arithmetic(n, args.link_gbps, args.tokens_per_rank, args.gpu_tflops, args.mfu)
    print(
        f"Qwen3-1.7B, LoRA r32, {n} GPUs, NCCL at {args.link_gbps:g} GB/s: compute {gpu['compute_s'] * 1000:.0f} ms "
        f"({args.tokens_per_rank} tokens per rank at {args.gpu_tflops:g} TFLOP/s x {args.mfu:g} MFU), "
        f"all-reduce {gpu['all_reduce_bytes'] / 1e6:.0f} MB in {gpu['all_reduce_s'] * 1000:.1f} ms, "
        f"efficiency {gpu['efficiency']:.3f}"
    )


def parse_args() -> argparse.Namespace:
    """The benchmark's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # the run's settings, as RunConfig has them (help, type, check); this benchmark's defaults where given
    add_config_argument(parser, "--model", default=None, help="name, alias or folder (default: tiny model)")
    add_config_argument(parser, "--batch-size", default=8)
    add_config_argument(parser, "--mini-batch-size")
    parser.add_argument("--prompt-len", type=int, default=96)
    parser.add_argument("--completion-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    add_config_argument(parser, "--device")
    parser.add_argument("--no-checkpointing", action="store_true", help="turn gradient checkpointing off")
    add_config_argument(parser, "--learner-workers", help="time 1 worker against N (gloo)")
    parser.add_argument("--link-gbps", type=float, default=100.0, help="NCCL bandwidth for the arithmetic")
    parser.add_argument("--tokens-per-rank", type=int, default=8192, help="tokens per rank per update")
    parser.add_argument("--gpu-tflops", type=float, default=989.0, help="bf16 dense peak (H100 SXM: 989)")
    parser.add_argument("--mfu", type=float, default=0.4, help="the share of the peak the update reaches")
    parser.add_argument(
        "--profile", action="store_true", help="also print torch.profiler's top ops of one more update"
    )
    return parser.parse_args()


def print_ratios(args: argparse.Namespace, device: Any, times: dict[str, list[tuple[float, float]]]) -> None:
    """The median wall and CPU time of each loop, and learner.update's ratio to the plain loop against its target."""
    import torch

    wall = {name: statistics.median(t[0] for t in ts) for name, ts in times.items()}
    cpu = {name: statistics.median(t[1] for t in ts) for name, ts in times.items()}
    print(
        f"model={args.model or 'tiny'} device={device} batch={args.batch_size} "
        f"micro={args.mini_batch_size} prompt~{args.prompt_len} completion~{args.completion_len} "
        f"checkpointing={not args.no_checkpointing} repeats={args.repeats} threads={torch.get_num_threads()}"
    )
    print(f"{'':<37} {'wall (median)':>14} {'cpu (median)':>14}")
    for name in times:
        print(f"{name:<37} {wall[name] * 1000:11.1f} ms {cpu[name] * 1000:11.1f} ms")
    base = "plain loop (same maths)"
    wall_ratio, cpu_ratio = wall["learner.update"] / wall[base], cpu["learner.update"] / cpu[base]
    ratio = wall_ratio if device.type == "cuda" else cpu_ratio
    print(f"ratio learner / plain (same maths)    wall {wall_ratio:.3f}  cpu {cpu_ratio:.3f}")
    verdict = "ok" if ratio <= TARGET_RATIO else "over target"
    which = "wall" if device.type == "cuda" else "cpu"
    print(f"ratio ({which} time)                      {ratio:.3f}  (target <= {TARGET_RATIO})  {verdict}")


def the_loops(learner: Any, batch: list, mini_batch_size: int) -> tuple[dict[str, Any], Any]:
    """The three loops to time on `batch` (learner.update and two plain ones), and the timer of one call."""
    import torch

    micro_batches = [
        (
            learner.collate(batch[i : i + mini_batch_size]),
            torch.tensor([s.reward for s in batch[i : i + mini_batch_size]], device=learner.device),
        )
        for i in range(0, len(batch), mini_batch_size)
    ]
    optimizer = torch.optim.AdamW(learner.adapter_parameters("default"), lr=learner.config.learning_rate)

    def timed(fn: Any) -> tuple[float, float]:
        """Wall-clock and process CPU seconds of one call (CPU time is steadier on a shared machine)."""
        sync(learner.device)
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        sync(learner.device)
        return time.perf_counter() - wall, time.process_time() - cpu

    runs = {
        "learner.update": lambda: learner.update(batch),
        "plain loop (same maths)": lambda: plain_update(learner, optimizer, micro_batches, len(batch), False),
        "plain loop (full-vocab log-softmax)": lambda: plain_update(
            learner, optimizer, micro_batches, len(batch), True
        ),
    }
    return runs, timed


def main() -> None:
    """Parse arguments, time both loops, print medians and the ratio."""
    args = parse_args()
    if args.learner_workers > 1:
        with tempfile.TemporaryDirectory() as tmp:
            model = args.model
            if model is None:
                from unstable_core.testing import make_tiny_model

                model = make_tiny_model(f"{tmp}/tiny", hidden_size=64, num_layers=4)
            data_parallel_report(args, model, tmp)
        return

    import torch

    from unstable_core import plugins

    if args.threads:
        torch.set_num_threads(args.threads)
    learner_cls = plugins.load("learner", "reinforce")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from unstable_core.testing import make_tiny_model

            model = make_tiny_model(f"{tmp}/tiny", hidden_size=64, num_layers=4)
        learner = learner_cls.create(
            model,
            run_dir=f"{tmp}/run",
            batch_size=args.batch_size,
            mini_batch_size=args.mini_batch_size,
            max_generation_len=args.completion_len * 2,
            gradient_checkpointing=not args.no_checkpointing,
            device=args.device,
        )
        learner.initialize_algorithm()
        vocab = learner.model.get_base_model().config.vocab_size
        batch = make_batch(args.batch_size, args.prompt_len, args.completion_len, vocab, seed=0)
        runs, timed = the_loops(learner, batch, args.mini_batch_size)
        for fn in runs.values():
            fn()  # warm-up
        counted, micro = learner_flops(learner, batch)
        arch = arch_of(learner.model.get_base_model().config)
        rows = int(statistics.median(m.positions for m in micro))  # a micro-batch's rows in each matmul
        on_cpu = learner.device.type == "cpu"
        peaks_before = matmul_peaks(arch, rows) if on_cpu else {}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        names = list(runs)
        for r in range(args.repeats):  # interleaved and rotated, so load drift and order hit all alike
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(timed(runs[name]))
        peaks_after = matmul_peaks(arch, rows) if on_cpu else {}
        phases = phase_seconds(learner, batch, args.repeats, lambda: sync(learner.device))
        profile = top_ops(learner, batch) if args.profile else None

    print_ratios(args, learner.device, times)
    print()
    peaks = {k: max(v, peaks_after[k]) for k, v in peaks_before.items()}  # the better of two measures
    print(
        "\n".join(
            report(
                counted,
                micro,
                statistics.median(t[0] for t in times["learner.update"]),
                peaks,
                phases,
                torch.get_num_threads(),
            )
        )
    )
    if profile is not None:
        print(f"\ntorch.profiler, one more update: the ops with the most self CPU time\n{profile}")


if __name__ == "__main__":
    main()
