"""The all-options reference TOML, `examples/reference.toml`, generated from the code: every RunConfig field
(its help, its option, its group) and every installed learner's algorithm options, with the values of
UnstableBaselines v0.2's run (`unstable_core.compat.unstable_baselines.REFERENCE_RUN`) where it set one and
unstable's defaults elsewhere. tests/test_config_reference.py fails when the committed file differs:

    python -m unstable_core.config_reference > examples/reference.toml
    python -m unstable_core.config_reference --check examples/reference.toml
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from unstable_core.compat.unstable_baselines import REFERENCE_RUN
from unstable_core.config import RunConfig, vllm_backend_options

WIDTH = 110
COMMAND = "python -m unstable_core.config_reference > examples/reference.toml"
HEADER = (
    "Every option of `unstable run`, with its help, grouped by purpose. Generated from the code (RunConfig in "
    "unstable_core/config.py and the installed learners' algorithm options): do not edit it by hand, run",
    f"  {COMMAND}",
    "",
    "Its values are UnstableBaselines v0.2's run (build()'s defaults, its minimal script and run.start()'s "
    "sizes), for a GPU, and unstable's defaults where the reference set nothing; \"default:\" gives unstable's "
    "own where the two differ (its sizes are for a CPU; its game and reward semantics are the reference's). "
    "A key left commented out is unset: its default applies.",
    "  unstable run --config examples/reference.toml",
    "Options given on the command line override the file; `unstable run --help` lists them.",
)


def toml_value(value: Any) -> str:
    """One TOML value on one line (strings as JSON strings, which TOML reads alike; tables inline)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TypeError(f"no TOML form for {value!r}")


def comment(text: str, prefix: str = "# ") -> list[str]:
    """`text` as comment lines of at most WIDTH characters."""
    lines = textwrap.wrap(
        text,
        WIDTH,
        initial_indent=prefix,
        subsequent_indent=prefix,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [prefix.rstrip()]


def assignment(key: str, value: Any) -> list[str]:
    """`key = value`; a table as one dotted key per entry, a list of several items one item per line."""
    if isinstance(value, dict) and value:
        return [line for k, v in value.items() for line in assignment(f"{key}.{k}", v)]
    one_line = f"{key} = {toml_value(value)}"
    if not isinstance(value, list) or len(value) < 2 and len(one_line) <= WIDTH:
        return [one_line]
    return [f"{key} = ["] + [f"  {toml_value(v)}," for v in value] + ["]"]


def _default(field: attrs.Attribute) -> Any:
    return field.default.factory() if isinstance(field.default, attrs.Factory) else field.default


def setting(field: attrs.Attribute) -> list[str]:
    """One RunConfig field: its help and option, where its value comes from, and the key (commented out
    when unset)."""
    flag = field.metadata.get("cli") or "--" + field.name.replace("_", "-")
    lines = comment(f"{field.metadata['help']} [{flag}]")
    default = _default(field)
    value, source = REFERENCE_RUN.get(field.name, (default, ""))
    notes = [source] if source else []
    if value != default:
        notes.append(f"default: {toml_value(default) if default is not None else 'unset'}")
    lines += comment("; ".join(notes), "#   ") if notes else []
    if value is None:
        return [*lines, f"# {field.name} = ...  (unset)"]
    if value == {}:
        return [*lines, f"# {field.name}.NAME = value  (none set)"]
    return lines + assignment(field.name, value)


def _vllm_options_note() -> list[str]:
    options = ", ".join(sorted(vllm_backend_options()))
    return comment(f"the vllm backend's options (vllm_config.NAME = value): {options}")


def run_settings() -> Iterator[str]:
    for field in attrs.fields(RunConfig):
        section = field.metadata.get("section")
        if section:
            yield ""
            yield from comment(f"---- {section}")
        yield ""
        yield from setting(field)
        if field.name == "vllm_config":
            yield from _vllm_options_note()
        if field.name == "algorithm_config":
            yield "#   each installed learner's options are at the end of this file"


def learner_settings(learners: Sequence[tuple[str, type]]) -> Iterator[str]:
    """Each learner's algorithm options (attrs fields with a `help`), commented out: uncomment those of the
    learner you choose."""
    from unstable_core.learners.base import BaseLearner

    yield ""
    yield from comment(
        "---- algorithm_config of each installed learner: only the chosen learner's options are allowed; "
        "uncomment those you change"
    )
    for name, cls in learners:
        yield ""
        config_cls = getattr(cls, "algorithm_config_class", None)
        if config_cls is None:
            own = cls.initialize_algorithm is not BaseLearner.initialize_algorithm
            yield from comment(f"{name}: " + ("options of its own, undeclared" if own else "no options"))
            continue
        yield from comment(f"{name} (learner = {json.dumps(name)}): {config_cls.__name__}")
        for field in attrs.fields(config_cls):
            yield from comment(field.metadata.get("help", ""), "#   ") if field.metadata.get("help") else []
            default = _default(field)
            key = f"algorithm_config.{field.name}"
            yield f"# {key} = {toml_value(default)}" if default is not None else f"# {key} = ...  (null)"


def installed_learners() -> list[tuple[str, type]]:
    """(name, class) of every learner the installed plugins register, by name."""
    from unstable_core.plugins import get_registry

    return [(c.name, c.load()) for c in get_registry().by_kind("learner")]


def reference_toml(learners: Sequence[tuple[str, type]] | None = None) -> str:
    """The reference TOML: RunConfig's fields, then `learners`' options (default: the installed ones)."""
    lines = [
        line for text in HEADER for line in (comment(text) if not text.startswith(" ") else [f"# {text}"])
    ]
    lines += run_settings()
    lines += learner_settings(installed_learners() if learners is None else learners)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    text = reference_toml()
    if args[:1] == ["--check"] and len(args) == 2:
        if Path(args[1]).read_text(encoding="utf-8") != text:
            print(f"{args[1]} differs from the code: regenerate it with `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if args:
        print("usage: python -m unstable_core.config_reference [--check FILE]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
