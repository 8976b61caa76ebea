"""Overhead of `learner.update(batch)` against a plain forward/backward/AdamW loop on the same batch.

All run on the same LoRA model with the same micro-batching and clipping; the plain loops get their
micro-batches pre-collated, so the ratio counts all of the learner's bookkeeping. Target: <= 1.15.
A second plain loop with the naive full-vocabulary log-softmax is timed for reference.

    python benchmarks/learner.py                        # tiny random model (seconds)
    python benchmarks/learner.py --model smollm2-135m   # the embedded default
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from typing import Any

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


def main() -> None:
    """Parse arguments, time both loops, print medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="name, alias or folder (default: tiny model)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--mini-batch-size", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=96)
    parser.add_argument("--completion-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default=None)
    parser.add_argument("--no-checkpointing", action="store_true", help="turn gradient checkpointing off")
    args = parser.parse_args()

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
        micro_batches = [
            (
                learner.collate(batch[i : i + args.mini_batch_size]),
                torch.tensor([s.reward for s in batch[i : i + args.mini_batch_size]], device=learner.device),
            )
            for i in range(0, len(batch), args.mini_batch_size)
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
            "plain loop (same maths)": lambda: plain_update(
                learner, optimizer, micro_batches, len(batch), False
            ),
            "plain loop (full-vocab log-softmax)": lambda: plain_update(
                learner, optimizer, micro_batches, len(batch), True
            ),
        }
        for fn in runs.values():
            fn()  # warm-up
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        names = list(runs)
        for r in range(args.repeats):  # interleaved and rotated, so load drift and order hit all alike
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(timed(runs[name]))

    wall = {name: statistics.median(t[0] for t in ts) for name, ts in times.items()}
    cpu = {name: statistics.median(t[1] for t in ts) for name, ts in times.items()}
    print(
        f"model={args.model or 'tiny'} device={learner.device} batch={args.batch_size} "
        f"micro={args.mini_batch_size} prompt~{args.prompt_len} completion~{args.completion_len} "
        f"checkpointing={not args.no_checkpointing} repeats={args.repeats} threads={torch.get_num_threads()}"
    )
    print(f"{'':<37} {'wall (median)':>14} {'cpu (median)':>14}")
    for name in runs:
        print(f"{name:<37} {wall[name] * 1000:11.1f} ms {cpu[name] * 1000:11.1f} ms")
    base = "plain loop (same maths)"
    wall_ratio, cpu_ratio = wall["learner.update"] / wall[base], cpu["learner.update"] / cpu[base]
    ratio = wall_ratio if learner.device.type == "cuda" else cpu_ratio
    print(f"ratio learner / plain (same maths)    wall {wall_ratio:.3f}  cpu {cpu_ratio:.3f}")
    verdict = "ok" if ratio <= TARGET_RATIO else "over target"
    which = "wall" if learner.device.type == "cuda" else "cpu"
    print(f"ratio ({which} time)                      {ratio:.3f}  (target <= {TARGET_RATIO})  {verdict}")


if __name__ == "__main__":
    main()
