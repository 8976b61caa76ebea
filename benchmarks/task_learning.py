"""Does the embedded default learn a single-turn task on a CPU? A GRPO-style run on a generated arithmetic
task (G answers per question, `group-relative` advantages, reward +1 correct / -1 wrong and nothing else),
with a scheduled evaluation of every K-th checkpoint on held-out questions, then:

- the accuracy per evaluated checkpoint with its Wilson 95% interval;
- `unstable eval` of the base model and the last checkpoint on the same questions, its table, and a
  two-proportion test of their accuracies (Fisher's exact test for small counts), target p < 0.01;
- the run's own verdict (first vs last quarter of the checkpoints, training answers included).

    python3 benchmarks/task_learning.py                         # arithmetic-1, 25 minutes
    python3 benchmarks/task_learning.py --task arithmetic-2 --minutes 30 --group 8
    python3 benchmarks/task_learning.py --analyse runs/my-run   # the tables of a finished run
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from learning import run_within_budget  # this folder's learning benchmark: the same budgeted run

from unstable_core.cli.options import add_config_argument, add_config_arguments
from unstable_core.envs.tasks import SOLO
from unstable_core.io import atomic_write_json, read_jsonl
from unstable_core.report.checkpoint_rates import rates_by_version
from unstable_core.report.learning_verdict import SIGNIFICANCE, learning_verdict
from unstable_core.report.stats import Rate, format_p, two_proportion_test


def eval_accuracy(run_dir: Path) -> dict[int, Rate]:
    """Accuracy per checkpoint from the scheduled evaluations in metrics.jsonl (correct / items)."""
    out = {}
    for record in read_jsonl(run_dir / "metrics.jsonl"):
        for key, value in record.items():
            if key.startswith("eval/") and key.endswith(f"/vs_{SOLO}/wins"):
                games = record[key[: -len("wins")] + "games"]
                out[int(record["step"])] = Rate(int(value), int(games))
    return dict(sorted(out.items()))


def eval_base_and_last(args: argparse.Namespace, run_dir: Path) -> dict[str, Rate]:
    """`unstable eval` of the base model and the run's last checkpoint on the questions the scheduled
    evaluation asks (the same items); prints its table and returns each model's accuracy."""
    import subprocess
    import sys

    from unstable_core.envs.catalogue import get_task
    from unstable_core.runtime.actors.scheduled_eval import ScheduledEval
    from unstable_core.types import EvalEnvSpec

    plan = ScheduledEval((EvalEnvSpec(args.task, 1, "task"),), 1, args.eval_items, args.seed)
    seeds = [g.seed for g in plan.games_of("ckpt-0", iter(range(10**6)).__next__)]
    task = get_task(args.task)
    questions = run_dir / "eval-questions.jsonl"
    questions.write_text(
        "".join(json.dumps({"prompt": (i := task.item(s)).prompt, "answer": i.answer}) + "\n" for s in seeds)
    )
    out = run_dir / "eval" / "base-vs-last"
    cmd = [sys.executable, "-m", "unstable_core", "eval", args.model, str(run_dir), "--task", str(questions),
           "--games", str(args.eval_items), "--max-generation-len", str(args.max_generation_len),
           "--temperature", str(args.temperature), "--seed", str(args.seed), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    print(proc.stdout)
    rows = json.loads((out / "summary.json").read_text())["results"]
    return {r["model"]: Rate(r["correct"], r["items"]) for r in rows}


def train(args: argparse.Namespace) -> Path:
    """The budgeted GRPO-style run; returns its run directory."""
    from unstable_core.runtime.run import build

    run = build(
        model_name=args.model,
        learner=args.learner,
        train_envs=[args.task],
        eval_tasks=[args.task],
        eval_every=args.eval_every,
        eval_games=args.eval_items,
        num_eval_workers=args.eval_workers,
        num_train_workers=args.train_workers,
        env_sampler_config={"repeat": args.group},
        final_transforms=[],
        step_transforms=[],  # the reward is the answer's correctness, nothing else
        sampling_transforms=["group-relative"],
        temperature=args.temperature,
        max_generation_len=args.max_generation_len,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        learning_steps=args.max_steps,
        runs_dir=args.runs_dir,
        run_name=f"bench-task-{args.task}-{int(time.time())}",
        seed=args.seed,
    )
    run_within_budget(
        run,
        args.minutes,
        lambda step, snap: (
            f"step {step}, {snap.get('counts', {}).get('train_games', 0)} answers, "
            f"{snap.get('elapsed_s', 0):.0f} s"
        ),
    )
    return run.run_dir


def report(run_dir: Path, evaluated: dict[str, Rate] | None) -> dict:
    """Print accuracy per checkpoint, base vs last checkpoint with its test, the run's verdict; write
    benchmark.json into the run directory."""
    acc = eval_accuracy(run_dir)
    print(f"\nrun directory: {run_dir}\nscheduled evaluation, accuracy per checkpoint (correct/n [95% CI]):")
    for version, rate in acc.items():
        print(f"  ckpt-{version:<4} {rate}")
    data: dict = {"run_dir": str(run_dir), "accuracy": {v: r.to_dict() for v, r in acc.items()}}
    if evaluated and len(evaluated) == 2:
        (base, first), (last, second) = evaluated.items()
        test = two_proportion_test(first, second)
        met = test.p_value < SIGNIFICANCE and second.rate > first.rate
        print(f"unstable eval on the same {first.n} questions: {base} {first.rate:.3f} -> {last} "
              f"{second.rate:.3f}, p = {format_p(test.p_value)} ({test.method}); target p < {SIGNIFICANCE}: "
              f"{'met' if met else 'missed'}")  # fmt: skip
        data["base_vs_last"] = {"base": base, "last": last, **test.to_dict(), "target_met": met}
    verdict = learning_verdict(rates_by_version(run_dir))
    print(f"run verdict (first vs last quarter of the checkpoints, training answers): {verdict.sentence}")
    data["verdict"] = verdict.sentence
    atomic_write_json(run_dir / "benchmark.json", data)
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="arithmetic-1")
    ap.add_argument("--minutes", type=float, default=25.0, help="wall-clock budget of the run")
    ap.add_argument("--group", type=int, default=8, help="answers per question (GRPO's G)")
    # the run's settings, as `unstable run` has them (help, default, check); this run's defaults where given
    add_config_arguments(ap, "--learner", "--model", "--temperature", "--runs-dir", "--seed")
    add_config_argument(ap, "--batch-size", default=32)
    add_config_argument(ap, "--learning-rate", default=2e-4)
    add_config_argument(ap, "--max-generation-len", default=24)
    add_config_argument(ap, "--eval-every", default=5)
    add_config_argument(
        ap,
        "--eval-items",
        "eval_games",
        default=128,
        help="held-out questions per evaluation (default: %(default)s)",
    )
    add_config_argument(ap, "--eval-workers", "num_eval_workers", default=8)
    add_config_argument(ap, "--train-workers", "num_train_workers", default=16)
    add_config_argument(ap, "--max-steps", "learning_steps", default=200)
    ap.add_argument("--no-eval", action="store_true", help="skip the base-vs-last `unstable eval`")
    ap.add_argument("--analyse", type=Path, help="only the tables of this finished run directory")
    args = ap.parse_args()
    started = time.time()
    run_dir = args.analyse or train(args)
    wall = time.time() - started
    evaluated = None if args.no_eval else eval_base_and_last(args, run_dir)
    print(f"\n{args.learner} on {args.task}: run {wall / 60:.1f} min, with the evaluation "
          f"{(time.time() - started) / 60:.1f} min wall")  # fmt: skip
    report(run_dir, evaluated)
    print(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()}}))


if __name__ == "__main__":
    main()
