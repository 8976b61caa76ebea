"""TensorBoard tracker: the run's scalars as event files in `runs/<name>/tensorboard/`
(`tensorboard --logdir runs` shows them): losses, rates, scheduled evaluations, TrueSkill ratings and
probes, the last two read from the run's league file and probes.jsonl as they grow."""

from __future__ import annotations

import json
import math
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.trackers.base import BaseTracker

INSTALL = "pip install 'unstable-core[tensorboard]'"
LOG_DIR = "tensorboard"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class TensorBoardTracker(BaseTracker):
    """Scalars by their metrics.jsonl key (`learner/loss`, `collection/train/<env>/invalid_move_rate`, ...),
    `ratings/...` and `probes/<probe>/<env>/<figure>`, each at its learner step."""

    requires = {"tensorboard": INSTALL}  # checked before a run starts

    def __init__(self, run_dir, run_name, config=None, **kwargs: Any) -> None:
        super().__init__(run_dir, run_name, config)
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise UnstableError(f"the tensorboard tracker needs TensorBoard: {INSTALL}") from exc
        self.log_dir = self.run_dir / LOG_DIR
        self._writer = SummaryWriter(log_dir=str(self.log_dir))
        self._probes_seen = 0

    def _scalars(self, metrics: dict[str, Any], step: int) -> None:
        for key, value in metrics.items():
            if _number(value):
                self._writer.add_scalar(key, value, step)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._scalars(metrics, step)
        self._ratings(step)
        self._probes()
        self._writer.flush()

    def log_eval(self, metrics: dict[str, float], version: int) -> None:
        # TensorBoard takes a step out of order: the evaluation goes at its checkpoint
        self._scalars(metrics, version)
        self._writer.flush()

    def _league(self) -> list[dict[str, Any]]:
        from unstable_core.league.league import league_path

        try:
            return json.loads(league_path(self.run_dir).read_text()).get("models", [])
        except (OSError, ValueError):  # not written yet, or being replaced
            return []

    def _ratings(self, step: int) -> None:
        """The newest checkpoint's and each fixed model's rating now."""
        models = self._league()
        ckpts = [m for m in models if m.get("kind") == "checkpoint"]
        if ckpts:
            newest = max(ckpts, key=lambda m: m.get("iteration", 0))
            self._scalars(
                {
                    "ratings/newest_checkpoint/mu": newest["mu"],
                    "ratings/newest_checkpoint/sigma": newest["sigma"],
                },
                step,
            )
        for m in models:
            if m.get("kind") == "fixed":
                self._scalars({f"ratings/{m['uid']}/mu": m["mu"]}, step)

    def _probes(self) -> None:
        """The probes recorded since last time, each at its step."""
        from unstable_core.io import read_jsonl

        records = read_jsonl(self.run_dir / "probes.jsonl")
        for r in records[self._probes_seen :]:
            for name, figure in (r.get("figures") or {}).items():
                self._scalars({f"probes/{r['probe']}/{r['env_id']}/{name}": figure.get("value")}, r["step"])
        self._probes_seen = len(records)

    def close(self) -> None:
        """The ratings of every checkpoint at the end, by checkpoint; then flush and close the files."""
        for m in self._league():
            if m.get("kind") == "checkpoint":
                self._scalars(
                    {"ratings_final/checkpoint_mu": m["mu"], "ratings_final/checkpoint_sigma": m["sigma"]},
                    m.get("iteration", 0),
                )
        self._probes()
        self._writer.close()
