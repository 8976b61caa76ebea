"""The reward transforms as settings write them: `name` or `name:key=value,...` (or a table with a `name`)
per transform, a list per stage. A `+` before a name adds that transform to the stage's list instead of
replacing the list (`--step-transform +length-penalty` keeps the default shaping)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from unstable_core.errors import ConfigError

ADD = "+"
#: the settings that hold each stage's transforms
STAGE_KEYS = {"final": "final_transforms", "step": "step_transforms", "sampling": "sampling_transforms"}


def spec_name(spec: Any) -> str:
    """The transform name a spec writes (`+` included): `name:...`, or a table's `name`."""
    if isinstance(spec, Mapping):
        return str(spec.get("name", ""))
    return str(spec).partition(":")[0].strip()


def is_addition(spec: Any) -> bool:
    """Whether a spec is written `+name...`: added to the stage's earlier list."""
    return spec_name(spec).startswith(ADD)


def without_plus(spec: Any) -> Any:
    """The spec with its leading `+` removed."""
    if not is_addition(spec):
        return spec
    if isinstance(spec, Mapping):
        return {**spec, "name": spec_name(spec)[len(ADD) :].strip()}
    return str(spec).strip()[len(ADD) :].strip()


def with_additions(earlier: Sequence[Any], given: Sequence[Any]) -> list[Any]:
    """A stage's transforms when `given` is set over `earlier` (an earlier layer's, or the default): only
    `+` entries add to `earlier`; any plain entry makes `given` the whole list (its `+` marks dropped)."""
    given = list(given)
    keep = list(earlier) if given and all(map(is_addition, given)) else []
    return keep + [without_plus(s) for s in given]


def resolve_additions(
    layer: Mapping[str, Any], earlier: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """`layer` with each stage's `+` entries added to that stage's list in `earlier`, else in `defaults`."""
    out = dict(layer)
    for key in STAGE_KEYS.values():
        given = out.get(key)
        if isinstance(given, (list, tuple)) and any(map(is_addition, given)):
            base = earlier.get(key)
            out[key] = with_additions(base if isinstance(base, (list, tuple)) else defaults[key], given)
    return out


def parse_transform(value: str | dict) -> tuple[str, dict[str, Any]]:
    """`name` or `name:key=value,key=value` (values read as JSON when they parse) -> (name, params)."""
    if isinstance(value, dict):
        params = dict(value)
        try:
            return params.pop("name"), params
        except KeyError as exc:
            raise ConfigError(f"reward transform table {value} needs a 'name' key") from exc
    name, _, rest = str(value).partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            raise ConfigError(f"reward transform {value!r}: expected name:key=value,key=value")
        try:
            params[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            params[key.strip()] = raw
    return name.strip(), params
