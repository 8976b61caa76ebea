"""Rates with their uncertainty: Wilson 95% intervals, the two-proportion z-test (also with clustered data)
and Fisher's exact test.

Every rate the project reports (invalid moves, format, wins) comes with its count and an interval, and a
claim that a rate changed comes with a test, so that 2 games never read as "win rate 1.000".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from unstable_core.quantiles import Z95


def wilson_interval(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials (k may be fractional, e.g. draws as halves);
    (0, 1) when n = 0. Unlike the normal interval it stays inside [0, 1] and is sane at k = 0 or n."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@attrs.frozen
class Rate:
    """k of n, with its Wilson 95% interval."""

    k: float
    n: int

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.k, self.n)

    def __str__(self) -> str:
        if not self.n:
            return "- (n=0)"
        lo, hi = self.interval
        return f"{self.rate:.3f} [{lo:.3f}, {hi:.3f}] (n={self.n})"

    def to_dict(self) -> dict[str, float]:
        lo, hi = self.interval
        return {"k": self.k, "n": self.n, "rate": self.rate if self.n else None, "lo": lo, "hi": hi}


def format_p(p: float) -> str:
    """A p-value with two significant digits, as people write it: 0.41, 0.0036, 2e-5."""
    text = f"{p:.2g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


@attrs.frozen
class Comparison:
    """Two rates and the pooled two-proportion z-test of their difference (second minus first)."""

    first: Rate
    second: Rate
    z: float
    p_value: float
    method: str = "z"  # "z", "cluster-z" (clustered trials), "fisher" (small counts) or "none" (too few)

    @property
    def p_text(self) -> str:
        """The p-value as people read it, with the test when it is not the z-test."""
        if self.method == "none":
            return "too few to test"
        note = {"fisher": " (Fisher exact)", "cluster-z": " (clustered by game)"}.get(self.method, "")
        return f"p = {format_p(self.p_value)}{note}"

    def to_dict(self) -> dict[str, object]:
        return {
            "first": self.first.to_dict(),
            "second": self.second.to_dict(),
            "z": self.z,
            "p_value": self.p_value,
            "method": self.method,
        }


MIN_EXPECTED = 5  # the usual rule: the normal approximation needs >= 5 expected in every cell


def fisher_exact(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided p-value of Fisher's exact test of k1/n1 against k2/n2: the probability, under the
    hypergeometric law with both margins fixed, of a table no more likely than the observed one."""
    total, n = k1 + k2, n1 + n2

    def prob(x: int) -> float:
        return math.comb(n1, x) * math.comb(n2, total - x) / math.comb(n, total)

    observed = prob(k1)
    tables = range(max(0, total - n2), min(n1, total) + 1)
    return min(1.0, sum(p for x in tables if (p := prob(x)) <= observed * (1 + 1e-9)))


def two_proportion_test(first: Rate, second: Rate) -> Comparison:
    """z = (p2 - p1) / sqrt(p (1 - p) (1/n1 + 1/n2)) with the pooled p; two-sided p-value from the normal.

    z is NaN (p = 1) when either count is 0 or every trial has the same outcome (no spread to test).
    When a cell expects fewer than 5, the normal p-value is not trusted: Fisher's exact test gives it for
    whole counts, and half counts (draws as 1/2) are reported as too few to test."""
    n1, n2 = first.n, second.n
    if n1 == 0 or n2 == 0:
        return Comparison(first, second, float("nan"), 1.0)
    pooled = (first.k + second.k) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return Comparison(first, second, float("nan"), 1.0)
    z = (second.k / n2 - first.k / n1) / se
    if min(n1, n2) * min(pooled, 1 - pooled) >= MIN_EXPECTED:
        return Comparison(first, second, z, math.erfc(abs(z) / math.sqrt(2)))
    if float(first.k).is_integer() and float(second.k).is_integer():
        p = fisher_exact(int(first.k), n1, int(second.k), n2)
        return Comparison(first, second, z, p, method="fisher")
    return Comparison(first, second, z, float("nan"), method="none")


def _clustered_variance(clusters: Sequence[tuple[int, int]]) -> float:
    """Cluster-robust variance of p = sum k / sum n over clusters (k_g, n_g), with the G / (G - 1) correction:
    G / (G - 1) * sum_g (k_g - p n_g)^2 / (sum n)^2."""
    n = sum(c[1] for c in clusters)
    p = sum(c[0] for c in clusters) / n
    g = len(clusters)
    return g / (g - 1) * sum((k - p * m) ** 2 for k, m in clusters) / n**2


def clustered_two_proportion_test(
    first: Sequence[tuple[int, int]], second: Sequence[tuple[int, int]]
) -> Comparison:
    """Two rates of trials that come in clusters (k_g successes of n_g, e.g. the moves of one seat in one
    game, which are not independent): z = (p2 - p1) / sqrt(V1 + V2) with cluster-robust variances, so that
    correlated moves do not pass for independent evidence. Falls back to `two_proportion_test` (and its
    Fisher rule for small counts) with fewer than 2 clusters on a side, no spread, or a cell expecting < 5."""
    a = Rate(sum(c[0] for c in first), sum(c[1] for c in first))
    b = Rate(sum(c[0] for c in second), sum(c[1] for c in second))
    plain = two_proportion_test(a, b)
    if plain.method != "z" or len(first) < 2 or len(second) < 2:
        return plain
    variance = _clustered_variance(first) + _clustered_variance(second)
    if variance <= 0:
        return plain
    z = (b.rate - a.rate) / math.sqrt(variance)
    return Comparison(a, b, z, math.erfc(abs(z) / math.sqrt(2)), method="cluster-z")


class TurnRates:
    """The invalid-move and format rates per turn of a class that counts `steps`, `invalid`, `formatted`."""

    steps: int
    invalid: int
    formatted: int

    @property
    def invalid_rate(self) -> Rate:
        return Rate(self.invalid, self.steps)

    @property
    def format_rate(self) -> Rate:
        return Rate(self.formatted, self.steps)
