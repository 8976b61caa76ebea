"""How much the learner's log-prob of a step depends on the micro-batch it is forwarded in (its layout).

The learner's log-probs (LoRA policy, fp32 LM head) of the same random steps, forwarded alone, in
right-padded micro-batches of 8 in order, in micro-batches of 8 with other companions (shuffled), and in
micro-batches of 4; each layout against another, as max and mean |difference| over the completion tokens.
bf16 (the GPU default) is emulated on the CPU by casting the model; fp32 is printed beside it. The same
layout forwarded twice gives exactly the same numbers, which is why the PPO learner computes pi_old on the
micro-batches its loss then uses.

    python benchmarks/bf16_layout.py                        # tiny random model (seconds)
    python benchmarks/bf16_layout.py --model smollm2-135m   # the embedded default (minutes on a CPU)
"""

from __future__ import annotations

import argparse
import random
import tempfile
from typing import Any

from unstable_core.cli.options import add_config_argument


def make_steps(n: int, vocab: int, seed: int) -> list[Any]:
    """`n` steps of random token ids: prompts of 20-120 tokens, completions of 4-24."""
    from unstable_core.types import Step

    rng = random.Random(seed)
    return [
        Step(
            pid=0,
            env_id="bench",
            obs="",
            act="",
            prompt_ids=[rng.randrange(100, vocab) for _ in range(rng.randint(20, 120))],
            completion_ids=[rng.randrange(100, vocab) for _ in range(rng.randint(4, 24))],
            reward=1.0,
            game_idx=i,
        )
        for i in range(n)
    ]


def completion_rows(learner: Any, batch: list[Any]) -> list[Any]:
    """Each step's completion log-probs ([n_completion], float64) when `batch` is one micro-batch."""
    import torch

    tokens = learner.collate(batch)
    with torch.no_grad():
        logp = learner.policy_logprobs(tokens)
    return [
        logp[b, len(s.prompt_ids) - 1 : len(s.prompt_ids) - 1 + len(s.completion_ids)].double()
        for b, s in enumerate(batch)
    ]


def in_layout(learner: Any, steps: list[Any], size: int, order: list[int]) -> list[Any]:
    """Every step's rows with the steps forwarded in micro-batches of `size` taken in `order`."""
    rows: list[Any] = [None] * len(steps)
    for lo in range(0, len(order), size):
        idx = order[lo : lo + size]
        for i, row in zip(idx, completion_rows(learner, [steps[i] for i in idx]), strict=True):
            rows[i] = row
    return rows


def gap(a: list[Any], b: list[Any]) -> tuple[float, float]:
    import torch

    d = torch.cat([(x - y).abs() for x, y in zip(a, b, strict=True)])
    return float(d.max()), float(d.mean())


def measure(model: str, dtype: str, n: int, seed: int, run_dir: str) -> dict[str, tuple[float, float]]:
    import torch
    from unstable_ppo.learner import PPOLearner

    learner = PPOLearner.create(
        model, device="cpu", run_dir=tempfile.mkdtemp(), lora_config={"lora_rank": 4}, seed=seed
    )
    learner.initialize_algorithm()  # (it never writes to its run_dir here)
    torch.manual_seed(seed)
    with torch.no_grad():  # a policy that differs from the base (peft starts LoRA B at 0)
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    learner.model.to(getattr(torch, dtype))
    steps = make_steps(n, learner.model.get_base_model().config.vocab_size, seed)
    ordered = list(range(n))
    shuffled = ordered[:]
    random.Random(seed).shuffle(shuffled)
    alone = in_layout(learner, steps, 1, ordered)
    by8 = in_layout(learner, steps, 8, ordered)
    return {
        "alone vs padded micro-batches of 8": gap(alone, by8),
        "micro-batches of 8 vs 8 with other companions": gap(by8, in_layout(learner, steps, 8, shuffled)),
        "micro-batches of 8 vs of 4": gap(by8, in_layout(learner, steps, 4, ordered)),
        "the same layout twice": gap(by8, in_layout(learner, steps, 8, ordered)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_argument(
        parser, "--model", default=None, help="a model name or folder (default: a tiny random Llama)"
    )
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        if args.model is None:
            from unstable_core.testing import make_tiny_model

            model = make_tiny_model(folder)
        else:
            model = args.model
        results = {
            dtype: measure(model, dtype, args.steps, args.seed, folder) for dtype in ("bfloat16", "float32")
        }
    print(f"model {args.model or 'tiny random Llama'}, {args.steps} steps; |log-prob difference| in nats")
    print(f"{'layouts compared':48s} {'bf16 max':>9s} {'bf16 mean':>10s} {'fp32 max':>9s} {'fp32 mean':>10s}")
    for name in results["bfloat16"]:
        (bmax, bmean), (fmax, fmean) = results["bfloat16"][name], results["float32"][name]
        print(f"{name:48s} {bmax:9.2g} {bmean:10.2g} {fmax:9.2g} {fmean:10.2g}")


if __name__ == "__main__":
    main()
