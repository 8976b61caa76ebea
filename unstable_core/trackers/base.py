"""The tracker interface: where scalar metrics go (files, Weights & Biases, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class BaseTracker:
    """Receives scalar metrics; subclasses write them somewhere. Registered via `register_trackers`.

    `requires` maps the modules a tracker imports to their install command: a run checks them first."""

    requires: dict[str, str] = {}

    def __init__(
        self, run_dir: str | Path, run_name: str, config: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_name = run_name
        self.config = config or {}

    def log(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def log_eval(self, metrics: dict[str, float], version: int) -> None:
        """A checkpoint's scheduled evaluation, logged at the checkpoint's step (it may arrive after later
        learner steps were logged)."""
        self.log(metrics, version)

    def close(self) -> None:
        """Flush and release what the tracker holds."""
