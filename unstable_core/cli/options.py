"""The command line's shared options: --debug, and the options generated from `RunConfig` fields (click's for
`unstable`, argparse's for the benchmark scripts)."""

from __future__ import annotations

import argparse
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


_TYPES = {"int": int, "float": float, "int | None": int, "float | None": float, "str": str, "str | None": str}
_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string"}


def _flag(field: attrs.Attribute) -> str:
    """The field's `unstable run` option: its metadata's `cli`, else `batch_size` -> `--batch-size`."""
    return field.metadata.get("cli") or "--" + field.name.replace("_", "-")


def _default(field: attrs.Attribute) -> Any:
    """The field's default value (a factory's made anew)."""
    return field.default.factory() if isinstance(field.default, attrs.Factory) else field.default


def _option_for(field: attrs.Attribute) -> Any:
    """A click option for one RunConfig field (`batch_size` -> `--batch-size`; lists repeat; dicts are JSON)."""
    flag = _flag(field)
    help_text = field.metadata.get("help", "")
    default = _default(field)
    help_text += f" [default: {default}]" if default not in (None, [], {}) else ""
    if field.type in ("bool", bool):
        neg = "--no-" + flag[2:]
        return click.option(f"{flag}/{neg}", field.name, default=None, help=help_text)
    if str(field.type).startswith("list"):
        return click.option(flag, field.name, multiple=True, default=None, help=help_text)
    if str(field.type).startswith("dict"):
        return click.option(flag, field.name, default=None, metavar="JSON", help=help_text)
    return click.option(flag, field.name, type=_TYPES.get(str(field.type), str), default=None, help=help_text)


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


def _json_object(text: str) -> dict[str, Any]:
    """A JSON object given on the command line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _checked(field: attrs.Attribute, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse's `type` for the field: the text converted, then the field's own check (its ConfigError is
    argparse's one-line error, exit 2)."""

    def value(text: str) -> Any:
        try:
            out = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {_TYPE_WORDS.get(convert, 'a value')}, got {text!r}"
            ) from None
        if not str(field.type).startswith("list"):  # a list's items come one by one
            try:
                field.validator(None, field, out)
            except ConfigError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        return out

    return value


def _argument_for(field: attrs.Attribute) -> dict[str, Any]:
    """add_argument's keywords for one RunConfig field: its help, type, default and check."""
    kind, default = str(field.type), _default(field)
    text = field.metadata.get("help", "").replace("%", "%%")
    if kind == "bool":
        return {"action": argparse.BooleanOptionalAction, "default": default, "help": text}
    if kind.startswith("list"):  # repeatable; not given: None, the run's default
        shown = f"; default: {', '.join(map(str, default))}".replace("%", "%%") if default else ""
        return {"action": "append", "type": _checked(field, str), "help": f"{text} (repeatable{shown})"}
    if default is not None:
        text += " (default: %(default)s)"
    if kind.startswith("dict"):
        return {"type": _checked(field, _json_object), "default": default, "metavar": "JSON", "help": text}
    return {"type": _checked(field, _TYPES.get(kind, str)), "default": default, "help": text}


def add_config_argument(
    parser: argparse.ArgumentParser, flag: str, name: str | None = None, **overrides: Any
) -> argparse.Action:
    """Add option `flag` for RunConfig's field `name` (default: the field `unstable run` calls `flag`) to an
    argparse parser: help, type, default and check from the field, `overrides` (add_argument's) win."""
    fields = attrs.fields_dict(RunConfig)
    if name is None:
        by_flag = {_flag(f): f.name for f in fields.values()}
        if flag not in by_flag:
            raise ValueError(f"{flag} is no option of `unstable run`: name its RunConfig field")
        name = by_flag[flag]
    return parser.add_argument(flag, **{**_argument_for(fields[name]), **overrides})


def add_config_arguments(parser: argparse.ArgumentParser, *flags: str) -> None:
    """Add these `unstable run` options to an argparse parser, each as RunConfig has it (`add_config_argument`)."""
    for flag in flags:
        add_config_argument(parser, flag)


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
