"""A learner step in float32 (oneDNN-packed frozen layers, the default) against the same step under
`learner_autocast` (the decoder in bfloat16, the LoRA, its gradients, AdamW and the LM head float32), in
micro-batches of `--mini-batch` states and in one, on the same TicTacToe-like states scored on every legal
answer, in one process: the median step of each, the ratios, and how far the bf16 step's answer log-probs
are from the float32 one's (before either steps).

    python benchmarks/learner_autocast.py                                 # tiny random model (seconds)
    python benchmarks/learner_autocast.py --model smollm2-135m --threads 1  # a run's learner on 2 cores

On a CPU without bfloat16 kernels a run falls back to float32 (`precision.native_bf16`); here the bf16 rows
are then timed anyway, emulated, to show what the fallback avoids.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from legal_answers import make_states  # noqa: E402

from unstable_core.learners import precision  # noqa: E402


def scorer_class() -> type:
    """A learner whose step is every legal answer's log pi and a loss of their log-sum-exp (the scoring an
    `mmd` step does); each micro-batch's scores are appended to its `found` list (set it before a step)."""
    import torch

    from unstable_core.learners import BaseLearner
    from unstable_core.learners.legal import answer_logprobs_of

    class Scorer(BaseLearner):
        def _update(self, batch, scale):
            ys = answer_logprobs_of(self, batch)
            (sum(y.logsumexp(-1) for y in ys) * scale).backward()
            self.found.append(torch.cat(ys).detach())
            return {}

    return Scorer


def time_way(Scorer: type, model, tmp: str, states, args, autocast: bool, size: int):
    """The median step of one way, and its answers' log-probs before any AdamW step."""
    import torch

    learner = Scorer.create(
        model, device="cpu", run_dir=tmp, batch_size=max(4, len(states)), learner_autocast=autocast
    )
    learner.initialize_algorithm()
    micro = [states[lo : lo + size] for lo in range(0, len(states), size)]
    spent, learner.found = [], []
    for repeat in range(args.repeats):
        start = time.perf_counter()
        learner.optimizer_step_on(micro)  # the learner's own context: autocast or not
        spent.append(time.perf_counter() - start)
        if repeat == 0:  # before any AdamW step: every way scores the same weights
            found = torch.cat(learner.found)
    return statistics.median(spent), found


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="model alias or folder (default: a tiny random model)")
    parser.add_argument("--states", type=int, default=18, help="states a step (TicTacToe's recipe: 16-21)")
    parser.add_argument("--answers", type=int, default=5, help="legal answers a state")
    parser.add_argument("--frame", type=int, default=60, help="prompt tokens every state shares")
    parser.add_argument("--own-prompt", type=int, default=115, help="prompt tokens of a state's own")
    parser.add_argument("--answer-len", type=int, default=2)
    parser.add_argument("--mini-batch", type=int, default=4, help="states a micro-batch (a run's default: 4)")
    parser.add_argument("--repeats", type=int, default=3, help="steps timed a way (min 2: the first warms)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (a run's learner: 1 of 2)"
    )
    args = parser.parse_args(argv)

    import torch

    from unstable_core.testing import make_tiny_model

    if args.threads:
        torch.set_num_threads(args.threads)
    Scorer = scorer_class()

    tmp = tempfile.mkdtemp()
    model = args.model or make_tiny_model(tmp)
    states = make_states(args)
    mb = args.mini_batch
    ways = {  # name: (autocast, states a micro-batch)
        "float32 (packed)": (False, mb),
        "bf16 autocast": (True, mb),
        "bf16 autocast, one micro-batch": (True, len(states)),
    }
    native = precision.native_bf16()
    if not native:
        print(precision.autocast_line("cpu") + "; the bf16 rows below are emulated")
    seconds, found = {}, {}
    emulate = (
        contextlib.nullcontext() if native else mock.patch.object(precision, "native_bf16", lambda: True)
    )
    with emulate:
        for name, (autocast, size) in ways.items():
            seconds[name], found[name] = time_way(Scorer, model, tmp, states, args, autocast, size)
    base = "float32 (packed)"
    print(
        f"{args.states} states x {args.answers} answers, prompts {args.frame} + ~{args.own_prompt} tokens, "
        f"micro-batches of {mb}, threads {torch.get_num_threads()}, median of {args.repeats}"
    )
    result = {"max_dlogp": float((found["bf16 autocast"] - found[base]).abs().max())}
    for name, spent in seconds.items():
        result[name] = spent
        print(f"{name:32s} {spent:7.2f} s a step   x{seconds[base] / spent:.2f} of float32")
    print(f"answer log-probs, bf16 against float32: max |d log pi| {result['max_dlogp']:.3f} nats")
    return result


if __name__ == "__main__":
    main()
