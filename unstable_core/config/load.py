"""A RunConfig from its layers: a TOML file, `build()`'s keyword arguments, the command line, each read by
the compat module first (UnstableBaselines v0.2's names), merged with later layers winning."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import unstable_baselines as ub
from unstable_core.config.run_config import RunConfig
from unstable_core.config.transforms import STAGE_KEYS, resolve_additions
from unstable_core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def transform_defaults() -> dict[str, list[Any]]:
    """Each stage's default reward transforms, what a `+name` adds to when nothing earlier set the stage."""
    fields = attrs.fields_dict(RunConfig)
    return {key: fields[key].default.factory() for key in STAGE_KEYS.values()}


def merge_layers(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Config dicts merged, later ones winning (None: not given), each first read by the compat module
    (`unstable_core.config.unstable_baselines`), so that an old name or a vllm_config key of an earlier
    layer yields to a later layer's field: `--temperature` beats a file's vllm_config.temperature."""
    out: dict[str, Any] = {}
    for layer in map(ub.translate, layers):
        layer = resolve_additions(layer, out, transform_defaults())  # `+name` adds to what came before
        names = ub.fields_set_by(layer)
        earlier = out.get("vllm_config")
        if isinstance(earlier, Mapping) and "vllm_config" not in layer:
            out["vllm_config"] = ub.without_keys_for(earlier, names)
        for key in [k for k in out if k in names]:
            del out[key]
        out.update(layer)
    return out


def config_from_dict(data: Mapping[str, Any]) -> RunConfig:
    """A RunConfig from a dict of field names, or of the names and values that the compat module reads
    (UnstableBaselines v0.2's build(); None: the default); unknown keys are errors."""
    fields = attrs.fields_dict(RunConfig)
    for key in data:
        if ub.RENAMED.get(key, key) not in fields and key not in ub.IGNORED:
            raise ConfigError(f"unknown config key {key!r}; see `unstable run --help` for the keys")
    clean = resolve_additions(ub.translate(data), {}, transform_defaults())
    defaults = {name: fields[name].default for name in ("model_name", "max_model_len")}
    clean = ub.apply_vllm_config(clean, defaults)
    try:
        return RunConfig(**clean)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc


def load_config(path: str | os.PathLike | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a TOML file (optional) and apply `overrides` (e.g. command-line options) on top."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise ConfigError(
                f"config file {str(p)!r} is a folder: give a TOML file (e.g. examples/reference.toml)"
            )
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"config file {str(p)!r} is not UTF-8 text (byte {exc.start}): save it as UTF-8 TOML"
            ) from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {str(p)!r} is not valid TOML: {exc}") from exc
    return config_from_dict(merge_layers(data, overrides or {}))
