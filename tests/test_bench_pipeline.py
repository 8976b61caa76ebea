"""Smoke test of benchmarks/pipeline.py: both admission policies on the tiny model, their figures read from
the runs' own files (no timing is asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "pipeline.py"


@pytest.mark.slow
def test_quick_pipeline_benchmark_runs_both_policies_and_compares_them(tmp_path):
    out = tmp_path / "pipeline.json"
    cmd = [sys.executable, str(BENCH), "--seeds", "1", "--quick", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    runs = {r["policy"]: r for r in data["runs"]}
    assert set(runs) == {"drop", "budget"} and all(r["updates"] == 4 for r in runs.values())
    assert runs["budget"]["steps_stale"] == 0 and runs["budget"]["steps_used"] > 0
    assert 0 < runs["budget"]["learner_busy"] <= 1 and 0 <= runs["budget"]["inference_busy"] <= 1
    assert data["ratio_per_seed"]["0"] > 0 and "budget / drop wall time" in proc.stdout
    assert data["budget_max_lost_share"] == 0 and "most steps a budget run lost: 0.0%" in proc.stdout
