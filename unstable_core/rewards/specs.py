"""The reward pipeline as settings write it: `name:key=value,...` per transform, per stage. A `+` before a
name adds that transform to the stage's list instead of replacing the list (`--step-transform
+length-penalty` keeps the default shaping), and `pipeline` says what a run uses, each transform with its
options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

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


def describe(name: str, params: Mapping[str, Any], transform: Any = None) -> str:
    """`name(key=value, ...)`: the options of the transform as built (every init field of an attrs
    transform, defaults included), else those the spec gave."""
    if transform is not None and attrs.has(type(transform)):
        params = {f.name: getattr(transform, f.name) for f in attrs.fields(type(transform)) if f.init}
    inner = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return f"{name}({inner})" if inner else name


def pipeline(cfg: Any, components: Any = None) -> dict[str, list[str]]:
    """Each stage's transforms as a run uses them, in order (`describe`); `components`: the built ones."""
    from unstable_core.config import parse_transform

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
