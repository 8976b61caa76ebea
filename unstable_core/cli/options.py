"""The command line's shared options: --debug, and the options generated from `RunConfig` fields."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import click

from unstable_core.config import API_FIELDS, RunConfig
from unstable_core.errors import ConfigError


def set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """--debug: UNSTABLE_DEBUG=1 for this process and the Ray actors it starts."""
    import os

    if value:
        os.environ["UNSTABLE_DEBUG"] = "1"


debug_option = click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=set_debug,
    help="Show tracebacks of errors (also UNSTABLE_DEBUG=1).",
)


def _option_for(field: attrs.Attribute) -> Any:
    """A click option for one RunConfig field (`batch_size` -> `--batch-size`; lists repeat; dicts are JSON)."""
    flag = field.metadata.get("cli") or "--" + field.name.replace("_", "-")
    help_text = field.metadata.get("help", "")
    default = field.default.factory() if isinstance(field.default, attrs.Factory) else field.default
    help_text += f" [default: {default}]" if default not in (None, [], {}) else ""
    if field.type in ("bool", bool):
        neg = "--no-" + flag[2:]
        return click.option(f"{flag}/{neg}", field.name, default=None, help=help_text)
    if str(field.type).startswith("list"):
        return click.option(flag, field.name, multiple=True, default=None, help=help_text)
    if str(field.type).startswith("dict"):
        return click.option(flag, field.name, default=None, metavar="JSON", help=help_text)
    types = {
        "int": int,
        "float": float,
        "int | None": int,
        "float | None": float,
        "str": str,
        "str | None": str,
    }
    return click.option(flag, field.name, type=types.get(str(field.type), str), default=None, help=help_text)


def config_options(*names: str) -> Callable[[Any], Any]:
    """Options for these RunConfig fields (all of them when none is named), written once in RunConfig: its
    help and default; each is None when not given, so that RunConfig's default applies."""
    fields = attrs.fields_dict(RunConfig)

    def decorate(fn: Any) -> Any:
        for name in reversed(names or tuple(fields)):
            fn = _option_for(fields[name])(fn)
        return fn

    return decorate


run_options = config_options()
#: `unstable run`'s options of openai:MODEL players (--base-url, --api-key-env, --api-*), for the other
#: commands that play API models
api_options = config_options(*API_FIELDS)


def overrides_from(options: dict[str, Any]) -> dict[str, Any]:
    """Command-line values that were given (None / empty tuples mean 'not given'); JSON dicts parsed."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if value is None or value == ():
            continue
        field = attrs.fields_dict(RunConfig)[key]
        if str(field.type).startswith("dict"):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"--{key.replace('_', '-')}: not valid JSON ({exc.msg}): {value!r}"
                ) from exc
            if not isinstance(value, dict):
                raise ConfigError(f"--{key.replace('_', '-')}: expected a JSON object, got {value!r}")
        elif isinstance(value, tuple):
            value = list(value)
        out[key] = value
    return out
