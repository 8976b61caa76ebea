"""Weights & Biases tracker; runs in offline mode when no API key is configured."""

from __future__ import annotations

import os
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.trackers.base import BaseTracker


class WandbTracker(BaseTracker):
    """Logs to W&B project `project`; `WANDB_MODE=offline` is used when `WANDB_API_KEY` is not set."""

    requires = {"wandb": "pip install 'unstable-core[wandb]'"}  # checked before a run starts

    def __init__(self, run_dir, run_name, config=None, project: str = "unstable", **kwargs: Any) -> None:
        super().__init__(run_dir, run_name, config)
        try:
            import wandb
        except ImportError as exc:
            raise UnstableError(
                "the wandb tracker needs Weights & Biases: pip install 'unstable-core[wandb]'"
            ) from exc
        mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
        self._run = wandb.init(
            project=project, name=run_name, config=self.config, dir=str(self.run_dir), mode=mode
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def log_eval(self, metrics: dict[str, float], version: int) -> None:
        # W&B steps only go forward: the checkpoint goes in as a value to plot against
        self._run.log({**metrics, "eval/checkpoint": version})

    def close(self) -> None:
        self._run.finish()
