"""Does training move the needle? The embedded default trained by REINFORCE for N learner steps on one game,
with format-success and invalid-move rates of the games played by the first and the last policy versions.

    python benchmarks/learning.py                  # 20 steps of smollm2-135m on TicTacToe-v0-train
    python benchmarks/learning.py --steps 5 --model /path/to/model
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from unstable_core.io import read_jsonl
from unstable_core.runtime.run import build


def rates_by_version(run_dir: Path) -> dict[int, dict[str, float]]:
    """Format-success and invalid-move rates of the training steps, by the policy version that played them."""
    acc: dict[int, list[tuple[bool, bool]]] = defaultdict(list)
    for game in read_jsonl(run_dir / "games" / "games.jsonl"):
        if game["info"]["failed"] or game["info"]["eval"]:
            continue
        for traj in game["trajectories"]:
            for s in traj["steps"]:
                acc[s["policy_version"]].append((s["format_ok"], s["invalid_move"]))
    return {
        v: {
            "steps": len(xs),
            "format": sum(f for f, _ in xs) / len(xs),
            "invalid": sum(i for _, i in xs) / len(xs),
        }
        for v, xs in sorted(acc.items())
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--env", default="TicTacToe-v0-train")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--learning-rate", type=float, default=1e-4)
    ap.add_argument("--runs-dir", default="runs")
    args = ap.parse_args()

    started = time.time()
    run = build(
        model_name=args.model,
        train_envs=[args.env],
        learning_steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        runs_dir=args.runs_dir,
        run_name=f"bench-learning-{int(started)}",
    )
    run.start()
    run.wait()
    rates = rates_by_version(run.run_dir)
    versions = sorted(rates)
    half = max(1, len(versions) // 4)
    first, last = versions[:half], versions[-half:]

    def pooled(vs: list[int], key: str) -> float:
        n = sum(rates[v]["steps"] for v in vs)
        return sum(rates[v][key] * rates[v]["steps"] for v in vs) / n

    print(f"\n{args.model} on {args.env}: {args.steps} REINFORCE steps in {time.time() - started:.0f} s")
    print(f"{'policy versions':>18} {'steps':>6} {'format rate':>12} {'invalid-move rate':>18}")
    for label, vs in (("start " + str(first), first), ("end " + str(last), last)):
        print(
            f"{label:>18} {sum(rates[v]['steps'] for v in vs):>6} {pooled(vs, 'format'):>12.3f} {pooled(vs, 'invalid'):>18.3f}"
        )
    rose = pooled(last, "format") > pooled(first, "format")
    print(f"format rate rose: {'yes' if rose else 'NO'} (target: it rises)   run directory: {run.run_dir}")


if __name__ == "__main__":
    main()
