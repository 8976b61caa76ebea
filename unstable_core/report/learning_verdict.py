"""Did the run learn? One plain sentence from the tests of `compare_quarters` (the first against the last
quarter of the checkpoints) and a line per rate, worded alike for `unstable run`'s summary and
`benchmarks/learning.py`.

The sentence names the tested rate with the smallest p: `invalid moves per turn 0.62 -> 0.31 (p = 2e-5 <
0.01): learning`. A significant change the wrong way (more invalid moves, fewer wins) reads `getting worse`;
without one, `no rate changed significantly at p < 0.01 (closest: ...)`; and when no rate could be tested,
`no test: ...` says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from unstable_core.envs.tasks import SOLO
from unstable_core.report.checkpoint_rates import WIN_PREFIX, VersionRates, compare_quarters, rates_by_version
from unstable_core.report.stats import Comparison, Rate, format_p

SIGNIFICANCE = 0.01
BETTER = {"invalid_move_rate": -1, "format_rate": +1}  # the sign of a change that is learning; win rates: +1
LEARNING, WORSE, NO_CHANGE, NO_TEST = "learning", "getting worse", "no significant change", "no test"


def rate_label(name: str) -> str:
    """`invalid_move_rate` -> `invalid moves per turn`, `win_rate_vs_base` -> `win rate vs base`."""
    if name == WIN_PREFIX + SOLO:
        return "task accuracy"
    if name.startswith(WIN_PREFIX):
        return f"win rate vs {name[len(WIN_PREFIX) :]}"
    return {"invalid_move_rate": "invalid moves per turn", "format_rate": "formatted answers per turn"}.get(
        name, name.replace("_", " ")
    )


def _unit(name: str) -> str:
    """What a rate counts: the learner's turns, or its games against an opponent."""
    if name == WIN_PREFIX + SOLO:
        return "answers"
    return f"games against {name[len(WIN_PREFIX) :]}" if name.startswith(WIN_PREFIX) else "turns"


def _values(a: Rate, b: Rate) -> str:
    """`0.62 -> 0.31`: two decimals, more when two different rates would print alike; `-` for no data."""
    for digits in (2, 3, 4):
        x, y = (f"{r.rate:.{digits}f}" if r.n else "-" for r in (a, b))
        if x != y or not (a.n and b.n) or a.rate == b.rate:
            break
    return f"{x} -> {y}"


def _versions_text(versions: list[int] | tuple[int, ...]) -> str:
    """`ckpt 3`, `ckpt 0-4` or `ckpt 0, 2, 5`."""
    vs = sorted(versions)
    if len(vs) > 1 and vs == list(range(vs[0], vs[-1] + 1)):
        return f"ckpt {vs[0]}-{vs[-1]}"
    return "ckpt " + ", ".join(map(str, vs))


@attrs.frozen
class RateChange:
    """One rate's first-vs-last-quarter test (None: fewer than two checkpoints with data), read as a person
    would."""

    name: str
    versions: tuple[int, ...]  # the checkpoints with data for this rate
    test: Comparison | None = None
    first_versions: tuple[int, ...] = ()
    last_versions: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return rate_label(self.name)

    @property
    def values(self) -> str:
        return _values(self.test.first, self.test.second) if self.test else "-"

    @property
    def why_untested(self) -> str | None:
        """Why no test was possible, or None when it was."""
        t, unit = self.test, _unit(self.name)
        if t is None:
            has = f"only {_versions_text(self.versions)} has" if self.versions else "no checkpoint has"
            return f"{has} {unit} (the quarters need two checkpoints)"
        if t.method == "none":
            return "too few to test"
        if t.z != t.z:  # NaN: every trial of both quarters had the same outcome
            return f"the same outcome ({t.first.rate:.2f}) in all {t.first.n + t.second.n} {unit}"
        return None

    @property
    def improved(self) -> bool:
        """Whether the change points the way that means learning (fewer invalid moves, more wins)."""
        return (
            self.test is not None
            and (self.test.second.rate - self.test.first.rate) * BETTER.get(self.name, +1) > 0
        )

    @property
    def verdict(self) -> str:
        if self.why_untested is not None:
            return NO_TEST
        if self.test.p_value < SIGNIFICANCE:
            return LEARNING if self.improved else WORSE
        return NO_CHANGE

    def line(self) -> str:
        """`invalid moves per turn, ckpt 0-4 vs 15-19: 0.620 [...] (n=179) -> 0.310 [...] (n=136), p = 2e-5
        (clustered by game): learning`."""
        if self.test is None:
            return f"{self.label}: no test, {self.why_untested}"
        first, last = _versions_text(self.first_versions), _versions_text(self.last_versions)
        head = f"{self.label}, {first} vs {last}: {self.test.first} -> {self.test.second}"
        why = self.why_untested
        return f"{head}: no test, {why}" if why else f"{head}, {self.test.p_text}: {self.verdict}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate": self.name,
            "label": self.label,
            "versions": list(self.versions),
            "first_versions": list(self.first_versions),
            "last_versions": list(self.last_versions),
            **(self.test.to_dict() if self.test else {}),
            "verdict": self.verdict,
            "why_untested": self.why_untested,
        }


@attrs.frozen
class LearningVerdict:
    """The sentence a run's summary opens with, the status it reads as, and every rate's test."""

    status: str  # LEARNING, WORSE, NO_CHANGE or NO_TEST
    sentence: str
    changes: tuple[RateChange, ...] = ()

    def lines(self) -> list[str]:
        """A heading with the threshold, then a line per rate."""
        if not self.changes:
            return []
        heading = (
            "first vs last quarter of the checkpoints with data for each rate, "
            f"significant at p < {SIGNIFICANCE}:"
        )
        return [heading, *(f"  {c.line()}" for c in self.changes)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "sentence": self.sentence,
            "significance": SIGNIFICANCE,
            "rates": [c.to_dict() for c in self.changes],
        }


def learning_verdict(rates: dict[int, VersionRates]) -> LearningVerdict:
    """The verdict of the rates per checkpoint (`rates_by_version`): the tested rate with the smallest p
    decides; a significant change the other way is added after `but`."""
    if not rates:
        return LearningVerdict(NO_TEST, "no test: no game finished")
    cmp = compare_quarters(rates)
    changes = tuple(
        RateChange(name, tuple(versions))
        if name not in cmp.tests
        else RateChange(
            name,
            tuple(versions),
            cmp.tests[name],
            tuple(cmp.quarters[name][0].versions),
            tuple(cmp.quarters[name][1].versions),
        )
        for name, versions in cmp.versions.items()
    )
    tested = [c for c in changes if c.why_untested is None]
    if not tested:
        reasons: dict[str, list[str]] = {}
        for c in changes:
            reasons.setdefault(c.why_untested, []).append(c.label)
        why = "; ".join(f"{' and '.join(labels)}: {reason}" for reason, labels in reasons.items())
        return LearningVerdict(NO_TEST, f"no test: {why}", changes)
    best = min(tested, key=lambda c: c.test.p_value)
    p = format_p(best.test.p_value)
    if best.verdict == NO_CHANGE:
        sentence = (
            f"no rate changed significantly at p < {SIGNIFICANCE} "
            f"(closest: {best.label} {best.values}, p = {p})"
        )
        return LearningVerdict(NO_CHANGE, sentence, changes)
    sentence = f"{best.label} {best.values} (p = {p} < {SIGNIFICANCE}): {best.verdict}"
    for c in tested:  # a significant change the other way is part of the story
        if c.verdict not in (NO_CHANGE, best.verdict):
            sentence += f"; but {c.label} {c.values} (p = {format_p(c.test.p_value)}): {c.verdict}"
    return LearningVerdict(best.verdict, sentence, changes)


def run_verdict(run_dir: str | Path) -> LearningVerdict:
    """The verdict of a run directory's games (games/games.jsonl and those of `unstable eval`)."""
    return learning_verdict(rates_by_version(run_dir))
