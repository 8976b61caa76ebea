"""Which learning signal teaches Kuhn Poker's card-dependent answers, and which stays card-blind?

No games, no opponent: each update sees the 12 first-round information sets once, rendered as a run renders
them (the real env driven to each set, `--template`, the run's LoRA), through a learner's own `update`.
The target is fixed and card-dependent: check J and Q first or after a check, bet K; fold J facing a bet,
call Q and K (exploitability 1/6). Rows (each a registered learner; `q` is the policy renormalised over the
two legal answers, the probe's view):

    cross-entropy     -log q(target)                         (mmd, eta 20, alpha 0: the target one-hot)
    exact-pg          softmax PG on q with the exact values +1/-1      (reinforce-legal, values given)
    exact-pg+entropy  the same, + 0.1 H(q), the exact entropy over the legal answers
    reinforce-q       an answer sampled from q, +1/-1: REINFORCE on log q  (reinforce-legal, played value)
    explore           the same, 20% of answers uniform, importance-weighted by q/mu
    reinforce         the run's signal: REINFORCE on the sampled completion's full-vocabulary log pi
    neurd             thresholded NeuRD (threshold 1) with the exact values
    mmd               MMD's target (eta 1, alpha 0.05, uniform magnet) fitted by cross-entropy

The q-based rows put no weight on the legal mass (`legal_mass_coef` 0): they measure the choice between
the legal answers only. `--direction` adds the row the saturation turns on: from the card-blind point (q
>= 0.99 on bet and call at every set, reached by cross-entropy), the first-order change of q(target) at
each set along each signal's expected update direction (unit step), before any step is taken.

    python3 benchmarks/kuhn_capacity.py --rows cross-entropy,reinforce,neurd --updates 200
    python3 benchmarks/kuhn_capacity.py --tiny --direction   # the saturation test's one-layer model
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from typing import Any

import attrs

from unstable_core.cli.options import add_config_argument

ROWS: dict[str, tuple[str, dict[str, Any], str]] = {  # row -> (learner, options, batch)
    "cross-entropy": ("mmd", {"eta": 20.0, "alpha": 0.0, "legal_mass_coef": 0.0}, "valued"),
    "exact-pg": ("reinforce-legal", {"legal_mass_coef": 0.0}, "valued"),
    "exact-pg+entropy": ("reinforce-legal", {"legal_mass_coef": 0.0, "entropy_coef": 0.1}, "valued"),
    "reinforce-q": ("reinforce-legal", {"legal_mass_coef": 0.0}, "sampled"),
    "explore": ("reinforce-legal", {"legal_mass_coef": 0.0}, "explore"),
    "reinforce": ("reinforce", {}, "completion"),
    "neurd": ("neurd", {"threshold": 1.0, "legal_mass_coef": 0.0}, "valued"),
    "mmd": ("mmd", {"legal_mass_coef": 0.0}, "valued"),
}
DIRECTIONS = ("cross-entropy", "exact-pg", "reinforce", "neurd", "mmd")
EXPLORE = 0.2


def fail(message: str) -> None:
    """End a bad invocation in one line, exit 2."""
    print(f"kuhn_capacity: {message}", file=sys.stderr)
    sys.exit(2)


_SCRATCH: list[tempfile.TemporaryDirectory] = []  # removed when the process ends


def scratch(prefix: str) -> str:
    """A fresh folder inside one temporary directory of this process, removed at its end."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="kuhn-capacity-"))
    return tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH[0].name)


def make_learner(model: str, row: str, lr: float, seed: int) -> Any:
    """The row's registered learner on `model` with the run's LoRA and 12 steps an update."""
    from unstable_core.plugins import get_registry

    name, options, _ = ROWS[row]
    learner = get_registry().load("learner", name).create(
        model, device="cpu", run_dir=scratch("learner-"), learning_rate=lr,
        max_generation_len=8, batch_size=12, mini_batch_size=12, seed=seed,
    )  # fmt: skip
    learner.initialize_algorithm(**options)
    return learner


def with_values(step: Any, values: list[float], played: int = -1) -> Any:
    """`step` with its legal answers' values (and the played index)."""
    from unstable_core.learners.legal import LEGAL

    legal = {**step.step_info[LEGAL], "values": values, "played": played}
    return attrs.evolve(step, step_info={LEGAL: legal})


def batch_of(kind: str, sets: list[Any], qs: list[list[float]], rng: random.Random) -> list[Any]:
    """One update's 12 steps for a row's kind of signal (see the module docstring)."""
    from unstable_core.testing.kuhn_sets import sampled, target_of, valued

    batch = []
    for kset, q in zip(sets, qs, strict=True):
        target = target_of(kset.key)
        if kind == "valued":
            batch.append(valued(kset, target))
        elif kind == "completion":
            batch.append(sampled(kset, target, q, rng))
        else:  # an answer from mu = q, or (1 - EXPLORE) q + EXPLORE uniform; Q_hat = r / mu at it
            eps = EXPLORE if kind == "explore" else 0.0
            mu = [(1 - eps) * p + eps / len(q) for p in q]
            k = rng.choices(range(len(q)), weights=mu)[0]
            reward = 1.0 if kset.moves[k] == target else -1.0
            values = [reward / mu[k] if i == k else 0.0 for i in range(len(q))]
            batch.append(with_values(kset.step, values, k))
    return batch


def measure(learner: Any, sets: list[Any], env_id: str) -> dict[str, Any]:
    """q(target) per set, their mean and the exact exploitability of the policy q."""
    from unstable_core.probes.kuhn_exploitability import KuhnExploitability
    from unstable_core.testing.kuhn_sets import policy_q, target_of

    qs = policy_q(learner, sets)
    by_key = {s.key: dict(zip(s.moves, q, strict=True)) for s, q in zip(sets, qs, strict=True)}
    right = {s.key: by_key[s.key][target_of(s.key)] for s in sets}
    result = KuhnExploitability()(lambda positions: [by_key[p.key] for p in positions], env_id)
    return {"target": right, "mean_target": sum(right.values()) / len(right),
            "exploitability": result.figures["exploitability"].value}  # fmt: skip


def train_row(
    args: argparse.Namespace, row: str, sets: list[Any], start: dict[str, Any] | None
) -> list[dict]:
    """`args.updates` updates of one row from `start` (an adapter state; None: a fresh LoRA), measured
    every `args.every`; prints and returns the measurements."""
    from peft import set_peft_model_state_dict

    from unstable_core.testing.kuhn_sets import policy_q

    learner = make_learner(args.model, row, args.lr, args.seed)
    if start is not None:
        set_peft_model_state_dict(learner.model, start)
    rng, rows, started = random.Random(args.seed), [], time.monotonic()
    for update in range(args.updates + 1):
        if update % args.every == 0 or update == args.updates:
            found = {"row": row, "update": update, "wall_s": time.monotonic() - started}
            found.update(measure(learner, sets, args.env))
            rows.append(found)
            wrong = sum(v < 0.5 for v in found["target"].values())
            print(f"{row:17s} update {update:4d}  q(target) mean {found['mean_target']:.3f} min "
                  f"{min(found['target'].values()):.3f}  sets wrong {wrong:2d}  exploitability "
                  f"{found['exploitability']:.3f}", flush=True)  # fmt: skip
        if update < args.updates:
            learner.update(batch_of(ROWS[row][2], sets, policy_q(learner, sets), rng))
    return rows


def card_blind(args: argparse.Namespace, sets: list[Any]) -> dict[str, Any]:
    """The adapter state at the card-blind point: cross-entropy to bet and call until q >= 0.99 at every set."""
    from peft import get_peft_model_state_dict

    from unstable_core.testing.kuhn_sets import AGGRESSIVE, target_q, valued

    learner = make_learner(args.model, "cross-entropy", args.lr, args.seed)
    aggressive = [next(m for m in s.moves if m in AGGRESSIVE) for s in sets]
    for update in range(1, 201):
        learner.update([valued(s, a) for s, a in zip(sets, aggressive, strict=True)])
        if min(target_q(learner, sets, aggressive).values()) >= 0.99:
            print(f"card-blind point: q(bet or call) >= 0.99 at every set after {update} updates")
            return get_peft_model_state_dict(learner.model)
    fail("cross-entropy did not reach the card-blind point in 200 updates; raise --lr")
    raise AssertionError  # unreachable


def expected_batch(row: str, sets: list[Any], qs: list[list[float]]) -> list[Any]:
    """The batch whose gradient is the row's expected one (a sampled row: every answer weighted by q)."""
    from unstable_core.testing.kuhn_sets import target_of, valued

    if ROWS[row][2] == "valued":
        return [valued(s, target_of(s.key)) for s in sets]
    batch = []
    for kset, q in zip(sets, qs, strict=True):  # REINFORCE: E_q[-r grad log pi(a)] as one row per answer
        for k, move in enumerate(kset.moves):
            reward = (1.0 if move == target_of(kset.key) else -1.0) * q[k] * len(q)
            ids = kset.step.step_info["legal"]["ids"][k]
            batch.append(attrs.evolve(kset.step, completion_ids=list(ids), reward=reward, step_info={}))
    return batch


def direction(
    args: argparse.Namespace, sets: list[Any], start: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """Per row, per set: d q(target) along the row's expected update direction (unit step), at `start`."""
    import torch
    from peft import set_peft_model_state_dict

    from unstable_core.learners.legal import LegalState, answer_logprobs, legal_logq
    from unstable_core.testing.kuhn_sets import policy_q, target_of

    out = {}
    for row in DIRECTIONS:
        learner = make_learner(args.model, row, args.lr, args.seed)
        set_peft_model_state_dict(learner.model, start)
        params = learner.trainable_parameters()
        learner.model.zero_grad()
        learner._update(expected_batch(row, sets, policy_q(learner, sets)), 1.0)
        step = [-(p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)) for p in params]
        norm = torch.sqrt(sum((s * s).sum() for s in step))
        out[row] = {}
        for kset in sets:
            learner.model.zero_grad()
            state = LegalState.of(kset.step)
            logq = legal_logq(answer_logprobs(learner, state))
            logq[kset.moves.index(target_of(kset.key))].exp().backward()
            change = sum((p.grad * s).sum() for p, s in zip(params, step, strict=True) if p.grad is not None)
            out[row][kset.key] = float(change / norm)
    return out


def print_direction(found: dict[str, dict[str, float]], start_q: dict[str, float]) -> None:
    """A table: per set, q(target) at the card-blind point and each row's first-order change of it."""
    print("first-order change of q(target) per unit step along each signal's expected update:")
    print(f"{'set':5s} {'q(target)':>9s} " + " ".join(f"{r:>13s}" for r in found))
    for key, q in start_q.items():
        print(f"{key:5s} {q:9.4f} " + " ".join(f"{found[r][key]:+13.4f}" for r in found))
    wrong = [k for k, q in start_q.items() if q < 0.5]
    for row, changes in found.items():
        raised = sum(changes[k] > 0 for k in wrong)
        print(f"{row}: raises q(target) at {raised} of the {len(wrong)} sets where the policy is wrong")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_config_argument(parser, "--model")  # the run's settings, as RunConfig has them; this test's defaults
    parser.add_argument("--tiny", action="store_true", help="the saturation test's one-layer model instead")
    add_config_argument(parser, "--template", default="kuhn-compact")
    add_config_argument(
        parser, "--env", action="store", default="KuhnPoker-v0-chips", help="env of the positions"
    )
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    parser.add_argument("--from", dest="start", choices=["fresh", "card-blind"], default="card-blind")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--every", type=int, default=20)
    add_config_argument(parser, "--lr", "learning_rate", default=1e-3)
    add_config_argument(parser, "--seed")
    parser.add_argument(
        "--direction", action="store_true", help="also the direction check at the card-blind point"
    )
    parser.add_argument("--json", default=None, help="also write the measurements to this file")
    args = parser.parse_args()
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown:
        fail(f"unknown row(s) {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    if args.updates < 1 or args.every < 1:
        fail("--updates and --every must be >= 1")
    return args


def main() -> None:
    import torch

    from unstable_core.errors import UnstableError
    from unstable_core.model_loading import load_tokenizer
    from unstable_core.testing.kuhn_sets import kuhn_sets, make_kuhn_model, target_of, target_q

    args = parse()
    torch.manual_seed(args.seed)
    try:
        if args.tiny:
            args.model = make_kuhn_model(scratch("model-"))
        sets = kuhn_sets(load_tokenizer(args.model), args.env, args.template)
    except (UnstableError, OSError, ValueError) as exc:
        fail(str(exc))
    start = card_blind(args, sets) if args.start == "card-blind" or args.direction else None
    report: dict[str, Any] = {"args": vars(args), "rows": []}
    if args.direction:
        probe = make_learner(args.model, "cross-entropy", args.lr, args.seed)
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(probe.model, start)
        start_q = target_q(probe, sets, [target_of(s.key) for s in sets])
        report["direction"] = direction(args, sets, start)
        print_direction(report["direction"], start_q)
    for row in args.rows:
        report["rows"] += train_row(args, row, sets, start if args.start == "card-blind" else None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
