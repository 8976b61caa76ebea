"""attrs validators of settings, one meaning each; every one raises ConfigError naming the setting, and
takes None as "not given" (a field whose None is not allowed says so with its type)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from unstable_core.errors import ConfigError

Validator = Callable[[Any, attrs.Attribute, Any], None]


def at_least_one(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A count: >= 1."""
    if value is not None and value < 1:
        raise ConfigError(f"{attribute.name} must be >= 1, got {value}")


def non_negative(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """>= 0."""
    if value is not None and value < 0:
        raise ConfigError(f"{attribute.name} must be >= 0, got {value}")


def in_range(lo: float, hi: float) -> Validator:
    """lo <= value <= hi."""

    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and not lo <= value <= hi:
            raise ConfigError(f"{attribute.name} must be between {lo:g} and {hi:g}, got {value}")

    return check


def above(lo: float, hi: float) -> Validator:
    """lo < value <= hi: the learners' own bounds (a learning rate or clip of 0 would change nothing)."""

    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and not lo < value <= hi:
            raise ConfigError(f"{attribute.name} must be > {lo} and <= {hi:g}, got {value}")

    return check


def int64(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """What torch's generators take (and TOML can write): a signed 64-bit integer."""
    if not -(2**63) <= value < 2**63:
        raise ConfigError(
            f"{attribute.name} must be a 64-bit integer (|{attribute.name}| < 2**63), got {value}"
        )


def choice(*allowed: str) -> Validator:
    """One of `allowed`."""

    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value not in allowed:
            raise ConfigError(f"{attribute.name} must be one of {', '.join(allowed)}; got {value!r}")

    return check


# ---- algorithm options (`--algorithm-config`): a learner's attrs options class uses these, so that every
# learner refuses a bool, a string or an out-of-range value with the same one line. `algorithm_config`
# puts the learner's name before the message: "ppo clip_low must be in (0, 1), got 1.0".


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_in(lo: float, hi: float, *, low_open: bool = False, high_open: bool = False) -> Validator:
    """A number between lo and hi, each end included unless `low_open` / `high_open`."""
    span = f"{'(' if low_open else '['}{lo:g}, {hi:g}{')' if high_open else ']'}"

    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        inside = _number(value) and (lo < value if low_open else lo <= value)
        inside = inside and (value < hi if high_open else value <= hi)
        if not inside:
            raise ConfigError(f"{attribute.name} must be a number in {span}, got {value!r}")

    return check


def number_above(lo: float, *, inclusive: bool = False, optional: bool = False) -> Validator:
    """A number > lo (>= lo with `inclusive`); None too with `optional` (an option that can be off)."""

    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if optional and value is None:
            return
        if not (_number(value) and (value >= lo if inclusive else value > lo)):
            off = " (or null: off)" if optional else ""
            raise ConfigError(
                f"{attribute.name} must be a number {'>=' if inclusive else '>'} {lo:g}{off}, got {value!r}"
            )

    return check


def count(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """An integer >= 1."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ConfigError(f"{attribute.name} must be an integer >= 1, got {value!r}")


def boolean(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """true or false, not 0, 1 or a string."""
    if not isinstance(value, bool):
        raise ConfigError(f"{attribute.name} must be true or false, got {value!r}")


positive = number_above(0.0)
non_negative_number = number_above(0.0, inclusive=True)
