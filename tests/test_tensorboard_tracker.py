"""`--tracker tensorboard`: losses, rates, evaluations, ratings and probes as scalars in event files that
TensorBoard reads back; without TensorBoard, one line and exit status 2 naming the extra to install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_scalars_read_back_with_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from unstable_core.plugins import get_registry
    from unstable_core.trackers.tensorboard import TensorBoardTracker

    assert get_registry().load("tracker", "tensorboard") is TensorBoardTracker
    tracker = TensorBoardTracker(tmp_path, "r")
    tracker.log({"learner/loss": 0.5, "collection/train/Kuhn/invalid_move_rate": 0.25, "x": None}, 1)
    models = [{"uid": "ckpt-1", "kind": "checkpoint", "iteration": 1, "mu": 26.0, "sigma": 2.0},
              {"uid": "random", "kind": "fixed", "iteration": 0, "mu": 20.0, "sigma": 1.0}]  # fmt: skip
    (tmp_path / "league.json").write_text(json.dumps({"models": models}))
    probe = {
        "step": 1,
        "probe": "kuhn-exploitability",
        "env_id": "KuhnPoker-v0",
        "figures": {"exploitability": {"value": 0.4}},
    }
    (tmp_path / "probes.jsonl").write_text(json.dumps(probe) + "\n")
    tracker.log({"learner/loss": 0.25}, 2)
    tracker.log_eval({"eval/Kuhn/random/win_rate": 0.75}, 1)
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    got = {tag: [(e.step, round(e.value, 4)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert got["learner/loss"] == [(1, 0.5), (2, 0.25)]
    assert got["collection/train/Kuhn/invalid_move_rate"] == [(1, 0.25)]
    assert got["eval/Kuhn/random/win_rate"] == [(1, 0.75)]
    assert got["ratings/newest_checkpoint/mu"] == [(2, 26.0)] and got["ratings/random/mu"] == [(2, 20.0)]
    assert got["ratings_final/checkpoint_mu"] == [(1, 26.0)]
    assert got["probes/kuhn-exploitability/KuhnPoker-v0/exploitability"] == [(1, 0.4)]


def test_without_tensorboard_one_line_exit_2(tiny_model, tmp_path):
    """A `sitecustomize` that hides the package, as a machine without it."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['tensorboard'] = None\n")
    path = os.pathsep.join(p for p in (str(hide), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(tmp_path / "runs"),
         "--tracker", "jsonl", "--tracker", "tensorboard"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    assert "pip install 'unstable-core[tensorboard]'" in lines[0]
    assert not Path(tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
