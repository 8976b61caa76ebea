"""Does a real model learn on a CPU? The embedded default trained by each learner within a wall-clock budget,
then the first and the last quarter of its policy versions compared: invalid-move rate and format rate of
the training steps, win rate (W/n) against the base model in evaluation games, each with its count and
Wilson 95% interval, and a two-proportion test (per-move rates clustered by game seat, small counts by
Fisher's exact test); the score (W + D/2)/n is shown beside it, untested. Target: at least one rate improves
with p < 0.01 per learner.

    python3 benchmarks/learning.py                          # reinforce, then a2c, 30 minutes each
    python3 benchmarks/learning.py --learner a2c --minutes 10
    python3 benchmarks/learning.py --learner ppo            # any installed learner (unstable plugins)
    python3 benchmarks/learning.py --analyse runs/my-run    # the same table for a finished run
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from unstable_core.checkpoint_rates import QuarterComparison, compare_quarters, rates_by_version
from unstable_core.io import atomic_write_json

TARGET_P = 0.01
BETTER = {"invalid_move_rate": -1, "format_rate": +1}  # the direction that counts as learning; wins: +1


class _Budget(Exception):
    """The wall-clock budget is spent: stop the run cleanly."""


def improved(name: str, z: float) -> bool:
    """Whether a z of the change (last minus first) points the way that means learning."""
    return z == z and z * BETTER.get(name, +1) > 0  # z == z: not NaN


def report(run_dir: Path, title: str) -> dict:
    """Print the first/last-quarter table of a run and write benchmark.json into it; returns the JSON."""
    rates = rates_by_version(run_dir)
    cmp: QuarterComparison | None = compare_quarters(rates)
    print(f"\n{title}\nrun directory: {run_dir}; policy versions with data: {sorted(rates)}")
    if cmp is None:
        print("fewer than two policy versions played: nothing to compare (give it more time)")
        return {}
    first, last = f"first quarter {cmp.first.versions}", f"last quarter {cmp.last.versions}"
    print(f"{'rate':<26} {first:<38} {last:<38} {'z':>6} {'p':>9}  test")
    met = []
    for name, test in cmp.tests.items():
        ok = improved(name, test.z) and test.p_value < TARGET_P
        met += [name] if ok else []
        row = f"{name:<26} {str(test.first):<38} {str(test.second):<38} {test.z:>6.2f} {test.p_value:>9.2g}"
        print(f"{row}  {test.method}{'  *' if ok else ''}")
    for opp in sorted(set(cmp.first.games) | set(cmp.last.games)):  # W + D/2: shown, not tested
        print(f"{'score_vs_' + opp:<26} {str(cmp.first.score(opp)):<38} {str(cmp.last.score(opp)):<38}")
    verdict = (
        f"target p < {TARGET_P} on at least one rate: {'met (' + ', '.join(met) + ')' if met else 'missed'}"
    )
    print(verdict)
    data = {"title": title, **cmp.to_dict(), "improved_with_p_below_target": met, "verdict": verdict}
    atomic_write_json(run_dir / "benchmark.json", data)
    return data


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
        fixed_opponents=["base"],
        learning_steps=args.max_steps,
        runs_dir=args.runs_dir,
        run_name=f"bench-learning-{learner}-{int(time.time())}",
        seed=args.seed,
    )
    deadline = time.time() + 60 * args.minutes
    shown = [-1]
    step_times: list[float] = []  # when each learner step was first seen

    def check(snap: dict) -> None:
        step = snap.get("learner_step", 0)
        if step != shown[0]:  # one line per learner step
            shown[0] = step
            step_times.append(time.time())
            games = snap.get("counts", {}).get("train_games", 0)
            print(
                f"{learner}: step {step}, {games} training games, {snap.get('elapsed_s', 0):.0f} s",
                flush=True,
            )
        # stop early enough that the step in progress still ends within the budget
        longest = max((b - a for a, b in zip(step_times[1:], step_times[2:], strict=False)), default=0.0)
        if time.time() + longest > deadline:
            raise _Budget

    run.start()
    try:
        run.wait(on_progress=check, poll_s=5.0)
    except _Budget:
        print(
            f"\n{learner}: budget of {args.minutes} minutes nearly spent; stopping after the update in progress"
        )
        run.stop()
    return run.run_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--learner", action="append", help="any installed learner, repeatable (default: reinforce, then a2c)"
    )
    ap.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget per learner")
    ap.add_argument("--analyse", type=Path, help="only print the table of this finished run directory")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--env", default="TicTacToe-v0-train")
    ap.add_argument("--template", default="default")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-generation-len", type=int, default=24)
    ap.add_argument("--learning-rate", type=float, default=3e-4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--mini-batch-size", type=int, default=8)
    ap.add_argument("--train-workers", type=int, default=16, help="training games in flight")
    ap.add_argument("--eval-workers", type=int, default=4, help="evaluation games in flight against base")
    ap.add_argument(
        "--max-steps", type=int, default=500, help="learner steps at most (the budget ends first)"
    )
    ap.add_argument("--runs-dir", default="runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if args.analyse:
        report(args.analyse, f"analysis of {args.analyse}")
        return
    results = {}
    for learner in args.learner or ["reinforce", "a2c"]:
        started = time.time()
        run_dir = train(args, learner)
        title = f"{learner}: {args.model} on {args.env}, {(time.time() - started) / 60:.1f} min wall"
        results[learner] = report(run_dir, title).get("verdict", "no data")
    print("\n" + "\n".join(f"{k}: {v}" for k, v in results.items()))
    print(json.dumps({"settings": vars(args) | {"analyse": None}}, default=str))


if __name__ == "__main__":
    main()
