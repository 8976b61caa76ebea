"""Scoring every legal answer of a micro-batch's states, forward and backward: the learner's two passes
(`learners/answer_tree.py`) against a forward per state and against one flat batch of the answers, on the
same states, each timed in the same run (median of `--repeats`), with their agreement.

    python benchmarks/legal_answers.py                                   # tiny random model (seconds)
    python benchmarks/legal_answers.py --model smollm2-135m              # Kuhn-like: 16 states x 2 answers
    python benchmarks/legal_answers.py --model smollm2-135m --states 8 --answers 7 --own-prompt 115
                                                                         # TicTacToe-like
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def make_states(args):
    """`args.states` states: a shared frame, then a prompt of their own (lengths vary by up to 2), each with
    `args.answers` answers of `args.answer_len` or one more tokens."""
    from unstable_core.learners.legal import LEGAL, LegalState
    from unstable_core.types import Step

    frame = [1000 + i for i in range(args.frame)]
    states = []
    for s in range(args.states):
        prompt = frame + [2000 + 7 * s + i for i in range(args.own_prompt + s % 3)]
        ids = [[300 + a] + [301 + j for j in range(args.answer_len - 1 + a % 2)] for a in range(args.answers)]
        info = {LEGAL: {"moves": [f"[{a}]" for a in range(args.answers)], "ids": ids, "played": 0}}
        step = Step(
            pid=0, env_id="bench", obs="", act="", prompt_ids=prompt, completion_ids=ids[0], step_info=info
        )
        states.append(LegalState.of(step))
    return states


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="model alias or folder (default: a tiny random model)")
    parser.add_argument("--states", type=int, default=16)
    parser.add_argument("--answers", type=int, default=2, help="legal answers a state")
    parser.add_argument("--frame", type=int, default=150, help="prompt tokens every state shares")
    parser.add_argument("--own-prompt", type=int, default=40, help="prompt tokens of a state's own")
    parser.add_argument("--answer-len", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import torch

    from unstable_core.learners import BaseLearner
    from unstable_core.learners.legal import answer_logprobs_of, answer_rows
    from unstable_core.testing import make_tiny_model

    class Scorer(BaseLearner):
        def _update(self, batch, scale):
            raise NotImplementedError

    tmp = tempfile.mkdtemp()
    model = args.model or make_tiny_model(tmp)
    learner = Scorer.create(model, device="cpu", run_dir=tmp)
    learner.initialize_algorithm()
    states = make_states(args)

    def flat():
        rows = [row for st in states for row in answer_rows(st)]
        return list(
            learner.policy_logprobs(learner.collate(rows)).sum(-1).split([len(st.ids) for st in states])
        )

    def per_state():
        return [learner.policy_logprobs(learner.collate(answer_rows(st))).sum(-1) for st in states]

    ways = {"two passes": lambda: answer_logprobs_of(learner, states), "per state": per_state, "flat": flat}
    times: dict[str, list[float]] = {name: [] for name in ways}
    found: dict[str, tuple] = {}
    for _ in range(args.repeats):
        for name, score in ways.items():
            learner.model.zero_grad()
            start = time.perf_counter()
            ys = score()
            sum(y.logsumexp(-1) for y in ys).backward()
            times[name].append(time.perf_counter() - start)
            grads = torch.cat([p.grad.flatten() for p in learner.adapter_parameters("default")])
            found[name] = (torch.cat(ys).detach(), grads)
    y0, g0 = found["two passes"]
    print(f"{args.states} states x {args.answers} answers, prompts {args.frame} + ~{args.own_prompt} tokens")
    result = {}
    for name, spent in times.items():
        y, g = found[name]
        row = {
            "seconds": statistics.median(spent),
            "ratio": statistics.median(spent) / statistics.median(times["two passes"]),
            "max_dy": float((y - y0).abs().max()),
            "grad_rel": float((g - g0).norm() / g0.norm()),
        }
        result[name] = row
        print(
            f"{name:11s} {row['seconds']:7.2f} s  x{row['ratio']:.2f} of two passes  "
            f"max |dy| {row['max_dy']:.1e}  |dg|/|g| {row['grad_rel']:.1e}"
        )
    return result


if __name__ == "__main__":
    main()
