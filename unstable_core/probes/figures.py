"""What a probe reports: its figures, each JSON-ready with its value, 95% interval and count, and the
reference values of each (a uniform policy's, an equilibrium's)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from unstable_core.quantiles import t_quantile


@attrs.frozen
class Figure:
    """A figure of a probe: its value, a 95% interval (low = high = value for an exact figure) and the
    number of positions it is measured on."""

    value: float
    low: float
    high: float
    n: int
    exact: bool = False  # computed, not estimated: no interval

    @classmethod
    def of_exact(cls, value: float, n: int) -> Figure:
        """A figure computed exactly (over every case, not a sample of them)."""
        return cls(value, value, value, n, exact=True)

    @classmethod
    def mean(cls, values: Sequence[float], lower: float = 0.0, upper: float = 1.0) -> Figure:
        """The mean of per-position values with its Student-t 95% interval over the positions, kept within
        [lower, upper]."""
        n = len(values)
        mean = sum(values) / n
        if n < 2:
            return cls(mean, lower, upper, n)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        half = t_quantile(n - 1) * sd / math.sqrt(n)
        return cls(mean, max(lower, mean - half), min(upper, mean + half), n)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    def __str__(self) -> str:
        if self.exact:
            return f"{self.value:.3f} (exact, n={self.n})"
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}] (n={self.n})"


@attrs.define
class ProbeResult:
    """What a probe measured: its figures by name, the reference values of each (`uniform`, `nash`,
    ...), and what it saw at each position (`positions`, JSON-ready)."""

    probe: str
    env_id: str
    figures: dict[str, Figure]
    references: dict[str, dict[str, float]] = attrs.field(factory=dict)
    positions: list[dict[str, Any]] = attrs.field(factory=list)
    wall_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: {probe, env_id, figures: {name: {value, low, high, n}}, references, positions, wall_s}."""
        return {
            "probe": self.probe,
            "env_id": self.env_id,
            "figures": {name: f.to_dict() for name, f in self.figures.items()},
            "references": {name: dict(r) for name, r in self.references.items()},
            "positions": list(self.positions),
            "wall_s": self.wall_s,
        }
