"""Test hook for the kill tests (tests/test_resume.py): named points of a run where the process pauses, so
that a test can SIGKILL it exactly there instead of racing it. Inactive unless UNSTABLE_TEST_PAUSE_AT is
set, which nothing but those tests does."""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "UNSTABLE_TEST_PAUSE_AT"  # "<point>:<marker file>", e.g. "update-2:/tmp/marker"
PAUSE_S_ENV = "UNSTABLE_TEST_PAUSE_S"  # how long to pause (default PAUSE_S): then the run goes on
PAUSE_S = 600.0


def pause_point(point: str) -> None:
    """At the point UNSTABLE_TEST_PAUSE_AT names: write the marker file (this process's id), then sleep
    PAUSE_S seconds (or UNSTABLE_TEST_PAUSE_S) for the test to kill the run. Points: `batch-<k>` (the
    learner took the batch of update k, collection goes on), `update-<k>` (update k done in memory, not
    saved), `checkpoint-step-<k>` (checkpoint k written to its temporary folder, not yet renamed),
    `rank-<r>-batch-<k>` (learner worker rank r > 0 got the batch of update k from rank 0). A name
    ending in `*` pauses at every point it begins (`update-*`: a learner slow at every update)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    name, _, marker = spec.partition(":")
    if not marker or name != point and not (name.endswith("*") and point.startswith(name[:-1])):
        return
    Path(marker).write_text(f"{os.getpid()}\n")
    time.sleep(float(os.environ.get(PAUSE_S_ENV) or PAUSE_S))
