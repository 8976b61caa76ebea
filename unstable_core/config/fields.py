"""Every setting's value checked against its annotation ('int', 'float | None', 'list[str]', ...) before its
own validator: a TOML "four" for an int, "yes" for a bool or a string for a list stops at load, naming the key
and what it expects."""

from __future__ import annotations

from typing import Any

import attrs

from unstable_core.errors import ConfigError

_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "list": "a list",
    "dict": "a table (a JSON object)",
}


def _kind(value: Any) -> str:
    """How a value reads in an error: 'the string "four"', 'the number 4.5', 'a table'."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, dict):
        return f"a table {value!r}"
    if isinstance(value, (list, tuple)):
        return f"a list {list(value)!r}"
    return f"{type(value).__name__} {value!r}"


def _is_type(value: Any, base: str) -> bool:
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if base == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "bool":
        return isinstance(value, bool)
    if base == "str":
        return isinstance(value, str)
    if base == "list":
        return isinstance(value, (list, tuple))
    return isinstance(value, dict)


def typed(type_text: str):
    """A validator checking a value against its field's annotation ('int', 'float | None', 'list[str]',
    ...) before any range check: a TOML "four" or 4.5 for an int, "yes" for a bool, a string for a list
    (which would be split into letters) all stop at load with the key and what it expects."""
    optional = type_text.endswith(" | None")
    base, _, inner = type_text.removesuffix(" | None").partition("[")

    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        if not _is_type(value, base):
            hint = ""
            if base == "list" and isinstance(value, str):
                hint = f" (write [{value!r}] for one item)".replace("'", '"')
            raise ConfigError(f"{attribute.name} must be {_TYPE_WORDS[base]}, got {_kind(value)}{hint}")
        if base == "list":
            for item in value:
                if inner == "str]" and not isinstance(item, str):
                    words = "a string"
                elif isinstance(item, (int, float, list, tuple)) or item is None:  # env and transform specs
                    words = "a string or a table"
                else:
                    continue
                raise ConfigError(f"{attribute.name}: each item must be {words}, got {_kind(item)}")

    return check


def check_types(cls: type, fields: list[attrs.Attribute]) -> list[attrs.Attribute]:
    """attrs field transformer: every field's type is checked first, then its own validator."""
    out = []
    for f in fields:
        checks = [typed(str(f.type))] + ([f.validator] if f.validator is not None else [])
        out.append(f.evolve(validator=attrs.validators.and_(*checks)))
    return out
