"""The reward pipeline a run uses, as it prints it: each stage's transforms with their options (the settings'
syntax, `name:key=value` and `+name`, is `unstable_core.config.transforms`')."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from unstable_core.config.transforms import STAGE_KEYS, parse_transform


def describe(name: str, params: Mapping[str, Any], transform: Any = None) -> str:
    """`name(key=value, ...)`: the options of the transform as built (every init field of an attrs
    transform, defaults included), else those the spec gave."""
    if transform is not None and attrs.has(type(transform)):
        params = {f.name: getattr(transform, f.name) for f in attrs.fields(type(transform)) if f.init}
    inner = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return f"{name}({inner})" if inner else name


def pipeline(cfg: Any, components: Any = None) -> dict[str, list[str]]:
    """Each stage's transforms as a run uses them, in order (`describe`); `components`: the built ones."""
    out: dict[str, list[str]] = {}
    for stage, key in STAGE_KEYS.items():
        built = list(getattr(components, stage, None) or [])
        specs = [parse_transform(s) for s in getattr(cfg, key)]
        out[stage] = [
            describe(name, params, built[i] if i < len(built) else None)
            for i, (name, params) in enumerate(specs)
        ]
    return out


def pipeline_text(stages: Mapping[str, Sequence[str]]) -> str:
    """One line, in the order a reward goes through them: `final a(...) -> step b(...), c(...) -> sampling
    d(...)` (`-` for an empty stage)."""
    return " -> ".join(f"{stage} {', '.join(names) or '-'}" for stage, names in stages.items())
