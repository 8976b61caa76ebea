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
