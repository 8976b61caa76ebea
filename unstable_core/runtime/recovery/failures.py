"""Failed games, watched: each distinct error with its count, and the verdict that stops a run whose games
keep failing (every one of the first `window` games, or more than `max_rate` of the last `window`)."""

from __future__ import annotations

import math
import re
from collections import deque
from typing import Any

MAX_DISTINCT = 50  # errors kept apart; later new ones are counted under OTHER
OTHER = "(other errors)"


def error_key(error: str) -> str:
    """Errors that differ only in numbers (game index, turn, seconds) are one error."""
    return re.sub(r"\d+(\.\d+)?", "N", error.strip().splitlines()[0] if error.strip() else "unknown error")


class FailureMonitor:
    """Counts games and failures; `verdict()` is the one line that stops the run, or None."""

    def __init__(self, window: int = 20, max_rate: float = 0.5) -> None:
        self.window, self.max_rate = window, max_rate
        self.recent: deque[bool] = deque(maxlen=window)
        self.games = self.failed = 0
        self.errors: dict[str, dict[str, Any]] = {}  # key -> first message, count, first game
        self._verdict: str | None = None

    def add(
        self, failed: bool, error: str | None = None, game_idx: int | None = None, kind: str = "train"
    ) -> None:
        self.games += 1
        self.recent.append(failed)
        if not failed:
            return
        self._count(error, game_idx, kind)
        if self._verdict is None:
            self._verdict = self._judge()

    def _count(self, error: str | None, game_idx: int | None, kind: str) -> None:
        self.failed += 1
        text = (error or "unknown error").strip().splitlines()[0][:300]
        key = error_key(text)
        if key not in self.errors and len(self.errors) >= MAX_DISTINCT:
            key = OTHER
        entry = self.errors.setdefault(key, {"error": text, "count": 0, "game_idx": game_idx, "kind": kind})
        entry["count"] += 1

    def most_common(self) -> dict[str, Any] | None:
        return max(self.errors.values(), key=lambda e: e["count"], default=None)

    def verdict(self) -> str | None:
        """Why the run must stop, naming the most common error, or None while the games are fine (once
        given, kept: the games after it do not take it back)."""
        return self._verdict

    def _judge(self) -> str | None:
        if len(self.recent) < self.window:
            return None
        bad = sum(self.recent)
        first = self.games == self.window
        if not (bad == self.window if first else bad > self.max_rate * self.window):
            return None
        where = (
            f"every one of the first {self.window}"
            if first and bad == self.window
            else f"{bad} of the last {self.window}"
        )
        top = self.most_common()
        return (
            f"{where} games failed ({self.failed} of {self.games} in all); most common error "
            f"({top['count']}x): {top['error']} -- fix its cause (rerun with --debug for tracebacks), or give "
            "--failure-window / --max-failure-rate to tolerate more failures"
        )

    def snapshot(self) -> dict[str, Any]:
        return {"games": self.games, "failed": self.failed, "errors": list(self.errors.values())}


class NonFiniteUpdates:
    """Counts learner updates whose loss or gradient was not finite (the optimizer step is skipped, so the
    update is a no-op); `limit` of them in a row stop the run instead of training on nothing."""

    def __init__(self, limit: int = 3) -> None:
        self.limit, self.total, self.in_a_row = limit, 0, 0

    def observe(self, metrics: dict[str, Any]) -> bool:
        """Count `metrics` of one update (adds `nonfinite_updates`); True when the run must stop."""
        losses = [v for k, v in metrics.items() if k == "loss" or k.endswith("_loss")]
        bad = bool(metrics.get("skipped_nonfinite")) or any(not math.isfinite(float(v)) for v in losses)
        self.total += bad
        self.in_a_row = self.in_a_row + 1 if bad else 0
        metrics["nonfinite_updates"] = float(self.total)
        return self.in_a_row >= self.limit

    def message(self, metrics: dict[str, Any]) -> str:
        return (
            f"{self.in_a_row} learner updates in a row had a non-finite loss or gradient (loss "
            f"{metrics.get('loss')!r}; the optimizer skipped them): check the rewards (a transform returning "
            "NaN or inf) and lower --learning-rate; --max-nonfinite-updates sets how many are tolerated"
        )
