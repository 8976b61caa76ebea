"""A pipeline that makes no progress stops with one line naming what is stuck (runtime/recovery/stall.py)."""

import os
import subprocess
import sys

from unstable_core.io import read_jsonl
from unstable_core.runtime.recovery.stall import LearnerPhase, StallWatch
from unstable_core.testing import TINY_RUN_ARGS

WATCH = StallWatch(timeout_s=100, batch_size=16)


def test_a_learner_in_one_phase_for_less_than_the_timeout_is_not_stuck():
    assert WATCH.check(99, LearnerPhase("waiting", 0, 3), {}) is None
    assert WATCH.check(99, LearnerPhase("updating", 0, 3), {}) is None
    assert WATCH.check(1e6, LearnerPhase("done", 0, 3), {}) is None  # its steps are done
    assert WATCH.check(1e6, LearnerPhase("starting", 0, 0), {}) is None  # loading: the liveness check's


def test_an_update_that_does_not_end_names_the_learner():
    line = WATCH.check(250, LearnerPhase("updating", 0, 3), {})
    assert line == "the learner: its update to step 4 has run for 250 s"


def test_no_batch_and_nothing_in_flight_names_the_admission():
    line = WATCH.check(120, LearnerPhase("waiting", 0, 2), {"size": 5, "games_in_flight": 0})
    assert line.startswith("no batch for 120 s at step 2: admission:") and "5 of the 16 steps" in line


def test_a_group_waiting_for_games_nobody_plays_names_the_incomplete_group():
    buffer = {"size": 0, "games_in_flight": 0, "groups_pending": 1}
    assert "an incomplete group: 1 group(s)" in WATCH.check(120, LearnerPhase("waiting", 0, 2), buffer)


def test_games_in_flight_that_never_finish_are_named():
    buffer = {"size": 4, "games_in_flight": 3, "groups_pending": 0}
    assert "waits for 3 training game(s) in flight" in WATCH.check(120, LearnerPhase("waiting", 0, 2), buffer)


def test_a_run_whose_learner_hangs_in_an_update_stops_in_one_line_at_its_checkpoint(tiny_model, tmp_path):
    """The learner sleeps 600 s in its second update (a fault point); the stall timeout is 5 s."""
    env = {**os.environ, "UNSTABLE_TEST_PAUSE_AT": f"batch-2:{tmp_path / 'marker'}"}
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(runs),
           "--run-name", "r", *TINY_RUN_ARGS, "--learning-steps", "3", "--stall-timeout-s", "5"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("Error:")]
    assert "the pipeline made no progress (the learner: its update to step 2 has run for" in line
    assert "last complete checkpoint (step 1)" in line and "--resume" in line
    assert (runs / "r" / "checkpoints" / "step-1").is_dir()
    events = [m for m in read_jsonl(runs / "r" / "metrics.jsonl") if m.get("event") == "stalled"]
    assert len(events) == 1 and events[0]["last_checkpoint_step"] == 1
