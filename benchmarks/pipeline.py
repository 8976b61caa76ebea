"""What the pipeline does with the time: the default `unstable run` under both admission policies, the same
seeds, one after the other on this machine. Per run: wall time to the last update, updates per minute, the
training steps generated and used per minute (and the share used), the learner's busy fraction, the
inference actors' generating fraction, and the run's own learning verdict. The target: admission control
("budget") reaches the last update in at most 0.75 of the dropping policy's time, measured in this run,
every seed still learning at p < 0.01, and loses (stale or evicted) at most 5% of the steps it played.

    python3 benchmarks/pipeline.py                     # 3 seeds x {drop, budget}, the default run each
    python3 benchmarks/pipeline.py --seeds 1 --quick   # a tiny random model, 4 updates: a smoke test
    python3 benchmarks/pipeline.py -- --learning-steps 8   # after --: passed to every `unstable run`
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from unstable_core.cli.options import add_config_argument
from unstable_core.io import atomic_write_json, read_jsonl
from unstable_core.runtime.recovery.resume import is_learner_record

POLICIES = ("drop", "budget")
TARGET_RATIO = 0.75
TARGET_LOST = 0.05  # at most this share of the played training steps dropped (stale or evicted) under budget


@attrs.frozen
class RunFigures:
    """One run's pipeline figures, read from its metrics.jsonl and summary.json."""

    policy: str
    seed: int
    updates: int
    wall_s: float  # from the command's start to its last update
    steps_generated: float
    steps_used: float
    steps_stale: float
    steps_evicted: float
    learner_busy: float
    inference_busy: float | None
    verdict: str
    p_value: float | None

    @property
    def updates_per_min(self) -> float:
        return 60 * self.updates / self.wall_s

    @property
    def used_per_min(self) -> float:
        return 60 * self.steps_used / self.wall_s

    @property
    def generated_per_min(self) -> float:
        return 60 * self.steps_generated / self.wall_s

    @property
    def lost_share(self) -> float:
        """The share of the generated training steps dropped as stale or evicted."""
        return (self.steps_stale + self.steps_evicted) / self.steps_generated if self.steps_generated else 0.0

    def row(self) -> list[str]:
        inference = "-" if self.inference_busy is None else f"{self.inference_busy:.2f}"
        p = "-" if self.p_value is None else f"{self.p_value:.2g}"
        return [
            self.policy, str(self.seed), f"{self.wall_s / 60:.1f}", f"{self.updates_per_min:.2f}",
            f"{self.used_per_min:.0f}", f"{self.generated_per_min:.0f}",
            f"{self.steps_used:.0f}/{self.steps_generated:.0f}", f"{self.steps_stale:.0f}",
            f"{self.steps_evicted:.0f}", f"{100 * self.lost_share:.1f}%", f"{self.learner_busy:.2f}", inference,
            p, self.verdict,
        ]  # fmt: skip


HEADER = [
    "policy", "seed", "min", "updates/min", "used/min", "generated/min", "used/generated", "stale",
    "evicted", "lost", "learner busy", "inference busy", "p", "verdict",
]  # fmt: skip


def read_run(run_dir: Path, policy: str, seed: int, started: float) -> RunFigures:
    """The figures of a finished run, timed from `started` (the command's start, model loading included)."""
    records = [m for m in read_jsonl(run_dir / "metrics.jsonl") if is_learner_record(m)]
    if not records:
        raise SystemExit(f"{run_dir}: no learner update was recorded (see its metrics.jsonl)")
    last = records[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    learning = summary.get("learning") or {}
    rates = [c for c in learning.get("rates", []) if c.get("p_value") is not None]
    p_values = [c["p_value"] for c in rates if c["verdict"] == "learning"] or [c["p_value"] for c in rates]
    return RunFigures(
        policy=policy,
        seed=seed,
        updates=int(last["step"]),
        wall_s=last["time"] - started,
        steps_generated=last.get("learner/buffer/steps_generated", 0.0),
        steps_used=last.get("learner/buffer/steps_served", 0.0),
        steps_stale=last.get("learner/buffer/steps_stale", 0.0),
        steps_evicted=last.get("learner/buffer/steps_evicted", 0.0),
        learner_busy=last.get("learner/pipeline/learner_busy_fraction", 0.0),
        inference_busy=(summary.get("inference") or {}).get("busy_fraction"),
        verdict=learning.get("status", "no verdict"),
        p_value=min(p_values) if p_values else None,
    )


def run_one(policy: str, seed: int, runs_dir: Path, extra: list[str]) -> RunFigures:
    """`unstable run --seed SEED --admission POLICY ...` as a user runs it; its figures."""
    name = f"pipeline-{policy}-{seed}"
    cmd = [sys.executable, "-m", "unstable_core", "run", "--seed", str(seed), "--admission", policy,
           "--runs-dir", str(runs_dir), "--run-name", name, *extra]  # fmt: skip
    print(f"{policy}, seed {seed}: {' '.join(cmd[2:])}", flush=True)
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    figures = read_run(runs_dir / name, policy, seed, started)
    print(
        "  " + " | ".join(f"{h} {v}" for h, v in zip(HEADER[2:], figures.row()[2:], strict=True)), flush=True
    )
    return figures


def quick_args(tmp: Path) -> list[str]:
    """A tiny random-weight model and 4 small updates (the benchmark's own smoke test)."""
    from unstable_core.testing import TINY_RUN_ARGS, make_tiny_model

    return ["--model", str(make_tiny_model(tmp / "tiny")), *TINY_RUN_ARGS, "--learning-steps", "4"]


def table(rows: list[RunFigures]) -> str:
    cells = [HEADER, *(r.row() for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def compare(rows: list[RunFigures]) -> dict[str, Any]:
    """Per seed, budget's wall time to the last update over drop's; their mean and the best, against the
    target; whether every budget run still learned (p < 0.01); the largest share a budget run lost."""
    by = {(r.policy, r.seed): r for r in rows}
    ratios = {
        seed: by["budget", seed].wall_s / by["drop", seed].wall_s
        for (policy, seed) in by
        if policy == "budget" and ("drop", seed) in by
    }
    budget = [r for r in rows if r.policy == "budget"]
    learned = all(r.verdict == "learning" for r in budget)
    return {
        "ratio_per_seed": ratios,
        "mean_ratio": statistics.mean(ratios.values()) if ratios else None,
        "best_ratio": min(ratios.values()) if ratios else None,
        "target": TARGET_RATIO,
        "every_budget_run_learned": learned,
        "budget_max_lost_share": max((r.lost_share for r in budget), default=None),
        "target_lost_share": TARGET_LOST,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1, each run under both policies")
    ap.add_argument("--quick", action="store_true", help="a tiny random model and 4 updates (smoke test)")
    add_config_argument(ap, "--runs-dir", default=None, help="where the runs go (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("extra", nargs="*", help="after --: options for every `unstable run`")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = Path(args.runs_dir or Path(tmp) / "runs")
        extra = (quick_args(Path(tmp)) if args.quick else []) + list(args.extra)
        rows = [run_one(policy, seed, runs_dir, extra) for seed in range(args.seeds) for policy in POLICIES]
    print("\n" + table(rows))
    result = compare(rows)
    if result["mean_ratio"] is not None:
        met = "met" if result["mean_ratio"] <= TARGET_RATIO else "missed"
        print(
            f"\nbudget / drop wall time to the last update: mean {result['mean_ratio']:.2f}, best "
            f"{result['best_ratio']:.2f} (target <= {TARGET_RATIO}: {met}); every budget run learned: "
            f"{result['every_budget_run_learned']}"
        )
    if result["budget_max_lost_share"] is not None:
        lost, met = result["budget_max_lost_share"], result["budget_max_lost_share"] <= TARGET_LOST
        print(f"most steps a budget run lost: {100 * lost:.1f}% (target <= {100 * TARGET_LOST:.0f}%: "
              f"{'met' if met else 'missed'})")  # fmt: skip
    if args.out:
        atomic_write_json(args.out, {"runs": [attrs.asdict(r) for r in rows], **result})


if __name__ == "__main__":
    main()
