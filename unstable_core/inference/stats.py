"""Throughput bookkeeping of a backend: totals, and tokens per second over a sliding time window."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import attrs


@attrs.frozen
class BatchRecord:
    """One finished batch: when it ran and how many tokens it produced."""

    start: float
    end: float
    tokens: int


class ThroughputMeter:
    """Counts batches, requests and tokens; `tokens_per_s` covers the batches of the last `window_s` seconds."""

    def __init__(self, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self.batches = 0
        self.requests = 0
        self.errors = 0
        self.total_tokens = 0
        self.busy_s = 0.0  # time with at least one batch running (overlapping batches counted once)
        self.started = clock()
        self._busy_until = self.started
        self._recent: collections.deque[BatchRecord] = collections.deque()

    def record_batch(self, n_requests: int, n_tokens: int, n_errors: int, start: float, end: float) -> None:
        """Add one finished batch of `n_requests` requests that generated `n_tokens` tokens."""
        self.batches += 1
        self.requests += n_requests
        self.errors += n_errors
        self.total_tokens += n_tokens
        self.busy_s += max(0.0, end - max(start, self._busy_until))
        self._busy_until = max(self._busy_until, end)
        self._recent.append(BatchRecord(start=start, end=end, tokens=n_tokens))

    def tokens_per_s(self) -> float:
        """Tokens of the batches that ended in the last `window_s` seconds, over the time since the first began."""
        now = self.clock()
        while self._recent and self._recent[0].end < now - self.window_s:
            self._recent.popleft()
        if not self._recent:
            return 0.0
        span = now - min(r.start for r in self._recent)
        return sum(r.tokens for r in self._recent) / span if span > 0 else 0.0

    def stats(self) -> dict[str, float]:
        """The counters as floats, ready for a tracker."""
        return {
            "tokens_per_s": self.tokens_per_s(),
            "total_tokens": float(self.total_tokens),
            "batches": float(self.batches),
            "requests": float(self.requests),
            "errors": float(self.errors),
            "mean_batch_size": self.requests / self.batches if self.batches else 0.0,
            "busy_fraction": self.busy_fraction(),
        }

    def busy_fraction(self) -> float:
        """The share of the time since the meter started in which the backend was generating."""
        elapsed = self.clock() - self.started
        return min(1.0, self.busy_s / elapsed) if elapsed > 0 else 0.0
