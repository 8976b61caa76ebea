"""Argument and input checks shared by the transforms, raising errors that name the argument and the fix.

The `*_arg` functions are attrs validators (called as `validator(instance, attribute, value)`).
"""

from __future__ import annotations

import math
from typing import Any

from unstable_core.errors import ConfigError, UnstableError


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def ema_alpha_arg(instance: Any, attribute: Any, value: Any) -> None:
    """An EMA weight of the old baseline: a number in [0, 1) (1 would never learn anything)."""
    if not _is_real(value) or not 0.0 <= value < 1.0:
        raise ConfigError(
            f"{type(instance).__name__}: {attribute.name} must be a number in [0, 1) "
            f"(the weight kept from the old baseline, e.g. 0.95), got {value!r}"
        )


def finite_arg(instance: Any, attribute: Any, value: Any) -> None:
    """A finite real number (ints from TOML are fine; bools and strings are not)."""
    if not _is_real(value) or not math.isfinite(value):
        raise ConfigError(
            f"{type(instance).__name__}: {attribute.name} must be a finite number, got {value!r}"
        )


def bool_arg(instance: Any, attribute: Any, value: Any) -> None:
    """A real boolean (`true`/`false` in TOML), not a string such as "false" that would read as true."""
    if not isinstance(value, bool):
        raise ConfigError(f"{type(instance).__name__}: {attribute.name} must be true or false, got {value!r}")


def finite_reward(value: Any, where: str) -> float:
    """`value` as a float, or an UnstableError saying which reward is not a finite number."""
    if not _is_real(value) or not math.isfinite(value):
        raise UnstableError(
            f"{where}: reward must be a finite number, got {value!r}; check the environment's rewards"
        )
    return float(value)
