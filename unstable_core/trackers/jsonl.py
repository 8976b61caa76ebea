"""Metrics as JSON lines in `runs/<name>/metrics.jsonl`."""

from __future__ import annotations

import time

from unstable_core.io import append_jsonl
from unstable_core.trackers.base import BaseTracker


class JSONLTracker(BaseTracker):
    """One JSON object per `log` call: `{"step", "time", metric: value, ...}`."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        append_jsonl(self.run_dir / "metrics.jsonl", [{"step": step, "time": time.time(), **metrics}])
