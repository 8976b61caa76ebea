"""benchmarks/report_size.py: a report's size and times, for a real run directory and for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "report_size.py"
FIXTURE = ROOT / "tests" / "fixtures" / "run-7a23685"


def test_a_run_directory_is_measured_from_a_copy():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--run", str(FIXTURE)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    figures = out.stdout.strip().splitlines()[-1]
    name = figures.split(" ", 1)[0]
    assert name == FIXTURE.name
    measured = json.loads(figures[figures.index("{") :])
    assert measured["report_mb"] > 0 and measured["write_s"] > 0
    assert not (FIXTURE / "report.html").exists()  # written in the copy, never in the run measured


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--run", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"error: {tmp_path} is not a run directory (it has no config.toml)"
