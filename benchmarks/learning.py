"""Does a real model learn on a CPU, and does it play? The embedded default trained by each learner within a
wall-clock budget, then the first and the last quarter of its policy versions (per rate, those with data for
it) compared, in the words of `unstable run`'s summary (`unstable_core.report.learning_verdict`): invalid-move rate
and format rate of the training steps, win rate (W/n) against each evaluation opponent (the base model and
the random legal-move player, seats alternated), each with its count and Wilson 95% interval, and a
two-proportion test (per-move rates clustered by game seat, small counts by Fisher's exact test); the score
(W + D/2)/n is shown beside it, untested. Then the win rate against each opponent per checkpoint: "it
plays" means a checkpoint beats the random player with the interval's lower bound above 0.5. Target: at
least one rate improves with p < 0.01 per learner.

    python3 benchmarks/learning.py                          # reinforce, then a2c, 30 minutes each
    python3 benchmarks/learning.py --learner a2c --minutes 10
    python3 benchmarks/learning.py --learner ppo            # any installed learner (unstable plugins)
    python3 benchmarks/learning.py --env KuhnPoker-v0-train --sampler fixed --fixed-opponent random
    python3 benchmarks/learning.py --sampler fixed --fixed-opponent random --admission drop
    python3 benchmarks/learning.py --analyse runs/my-run    # the same tables for a finished run
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unstable_core.cli.options import add_config_argument, add_config_arguments
from unstable_core.config.run_config import DEFAULT_ENV
from unstable_core.io import atomic_write_json
from unstable_core.report.checkpoint_rates import WIN_PREFIX, VersionRates, compare_quarters, rates_by_version
from unstable_core.report.learning_verdict import LEARNING, SIGNIFICANCE, learning_verdict
from unstable_core.report.stats import format_p

TARGET_P = SIGNIFICANCE


class _Budget(Exception):
    """The wall-clock budget is spent: stop the run cleanly."""


def per_checkpoint(rates: dict[int, VersionRates], opponent: str) -> list[dict]:
    """Each checkpoint's W/D/L and win rate (Wilson 95%) against `opponent`, printed; the rows as JSON."""
    rows = []
    for version, r in rates.items():
        if not r.games.get(opponent):
            continue
        w, d, lost = r.wdl(opponent)
        rate = r.win_rate(opponent)
        plays = rate.interval[0] > 0.5
        print(f"  ckpt-{version:<4} {w}/{d}/{lost:<9} {rate!s:<32}{'  beats it' if plays else ''}")
        rows.append({"checkpoint": version, "wins": w, "draws": d, "losses": lost, **rate.to_dict()})
    return rows


def report(run_dir: Path, title: str) -> dict:
    """Print the first/last-quarter table of a run and the sentence `unstable run`'s summary opens with;
    write benchmark.json into the run directory; returns the JSON."""
    rates = rates_by_version(run_dir)
    cmp = compare_quarters(rates)
    verdict = learning_verdict(rates)
    print(f"\n{title}\nrun directory: {run_dir}; policy versions with data: {sorted(rates)}")
    print(f"{'rate':<28} {'checkpoints':<14} {'first quarter':<38} {'last quarter':<38} {'p':>9}  test")
    for change in verdict.changes:
        if change.test is None:
            print(f"{change.label:<28} {'':<14} {'':<38} {'':<38} {'-':>9}  no test: {change.why_untested}")
            continue
        first, last = change.first_versions, change.last_versions
        where = f"{_span(first)} vs {_span(last)}"
        why = change.why_untested
        p = "-" if why else format_p(change.test.p_value)
        test = f"no test: {why}" if why else f"{change.test.method}: {change.verdict}"
        row = f"{change.label:<28} {where:<14} {str(change.test.first):<38} {str(change.test.second):<38} {p:>9}"
        print(f"{row}  {test}")
    for name, (first, last) in cmp.quarters.items():  # W + D/2: shown, not tested
        if name.startswith(WIN_PREFIX):
            opp = name[len(WIN_PREFIX) :]
            print(f"{'score vs ' + opp:<28} {'':<14} {str(first.score(opp)):<38} {str(last.score(opp)):<38}")
    met = [c.name for c in verdict.changes if c.verdict == LEARNING]
    target = (
        f"target p < {TARGET_P} on at least one rate: {'met (' + ', '.join(met) + ')' if met else 'missed'}"
    )
    print(f"result: {verdict.sentence}\n{target}")
    by_checkpoint = {}
    for opp in sorted({o for r in rates.values() for o in r.games}):
        print(f"win rate against {opp} per checkpoint (W/D/L, W/n [95% CI]):")
        by_checkpoint[opp] = per_checkpoint(rates, opp)
    data = {
        "title": title,
        "summary": verdict.sentence,
        "learning": verdict.to_dict(),
        "improved_with_p_below_target": met,
        "verdict": target,
        "per_checkpoint": by_checkpoint,
    }
    atomic_write_json(run_dir / "benchmark.json", data)
    return data


def _span(versions: tuple[int, ...]) -> str:
    return str(versions[0]) if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"


def train(args: argparse.Namespace, learner: str) -> Path:
    """One budgeted run of `learner`; returns its run directory."""
    from unstable_core.runtime.run import build

    run = build(
        model_name=args.model,
        learner=learner,
        train_envs=[args.env],
        prompt_template=args.template,
        temperature=args.temperature,
        max_generation_len=args.max_generation_len,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        mini_batch_size=args.mini_batch_size,
        num_train_workers=args.train_workers,
        num_eval_workers=args.eval_workers,
        sampler=args.sampler,
        fixed_opponents=args.fixed_opponent or ["base"],
        eval_envs=[f"{args.env}:2:{opp}" for opp in args.eval_opponent or ["base", "random"]],
        algorithm_config=args.algorithm_config,
        learning_steps=args.max_steps,
        runs_dir=args.runs_dir,
        run_name=f"bench-learning-{learner}-{args.admission}-{int(time.time())}",
        seed=args.seed,
        admission=args.admission,
    )

    def line(step: int, snap: dict) -> str:
        games = snap.get("counts", {}).get("train_games", 0)
        return f"{learner}: step {step}, {games} training games, {snap.get('elapsed_s', 0):.0f} s"

    run_within_budget(run, args.minutes, line)
    return run.run_dir


def run_within_budget(run: Any, minutes: float, line: Callable[[int, dict], str]) -> None:
    """Start `run` and wait for it, printing `line(step, progress)` once per learner step; stop it cleanly
    when the step in progress would end after `minutes` of wall clock."""
    deadline = time.time() + 60 * minutes
    step_times: list[float] = []  # when each learner step was first seen
    shown = [-1]

    def check(snap: dict) -> None:
        step = snap.get("learner_step", 0)
        if step != shown[0]:
            shown[0] = step
            step_times.append(time.time())
            print(line(step, snap), flush=True)
        # stop early enough that the step in progress still ends within the budget
        longest = max((b - a for a, b in zip(step_times[1:], step_times[2:], strict=False)), default=0.0)
        if time.time() + longest > deadline:
            raise _Budget

    run.start()
    try:
        run.wait(on_progress=check, poll_s=5.0)
    except _Budget:
        print(f"\nbudget of {minutes} minutes nearly spent; stopping after the update in progress")
        run.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_argument(  # each its own run
        ap,
        "--learner",
        action="append",
        default=None,
        help="any installed learner, repeatable (default: reinforce, then a2c)",
    )
    ap.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget per learner")
    ap.add_argument("--analyse", type=Path, help="only print the table of this finished run directory")
    # the run's settings, as `unstable run` has them (help, default, check), except where noted
    add_config_arguments(ap, "--model", "--template", "--temperature", "--max-generation-len")
    add_config_arguments(ap, "--learning-rate", "--batch-size", "--mini-batch-size", "--sampler")
    add_config_arguments(ap, "--algorithm-config", "--admission", "--runs-dir", "--seed")
    add_config_argument(
        ap,
        "--env",
        action="store",
        default=DEFAULT_ENV,
        help="env to train and evaluate on (default: %(default)s)",
    )
    add_config_argument(ap, "--train-workers", "num_train_workers")
    add_config_argument(ap, "--eval-workers", "num_eval_workers")
    ap.add_argument(
        "--eval-opponent", action="append", help="evaluation opponent, repeatable (default: base and random)"
    )
    add_config_argument(ap, "--fixed-opponent", help="for --sampler fixed, repeatable (default: base)")
    add_config_argument(
        ap,
        "--max-steps",
        "learning_steps",
        default=500,
        help="learner steps at most (the budget ends first; default: %(default)s)",
    )
    args = ap.parse_args()

    if args.analyse:
        report(args.analyse, f"analysis of {args.analyse}")
        return
    results = {}
    for learner in args.learner or ["reinforce", "a2c"]:
        started = time.time()
        run_dir = train(args, learner)
        title = f"{learner}: {args.model} on {args.env}, {(time.time() - started) / 60:.1f} min wall"
        results[learner] = report(run_dir, title)["summary"]
    print("\n" + "\n".join(f"{k}: {v}" for k, v in results.items()))
    print(json.dumps({"settings": vars(args) | {"analyse": None}}, default=str))


if __name__ == "__main__":
    main()
