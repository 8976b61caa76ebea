"""The all-options reference TOML, `examples/reference.toml`: every RunConfig field (its help, its option,
its group) and the given learners' algorithm options, with the values of UnstableBaselines v0.2's run
(`unstable_core.config.unstable_baselines.REFERENCE_RUN`) where it set one and unstable's defaults
elsewhere. The installed learners and the vllm backend's options are found by the command that writes it,
`python -m unstable_core.cli.reference` (tests/test_config_reference.py fails when the committed file
differs).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs

from unstable_core.config.run_config import RunConfig
from unstable_core.config.unstable_baselines import REFERENCE_RUN

WIDTH = 110
COMMAND = "python -m unstable_core.cli.reference > examples/reference.toml"
HEADER = (
    "Every option of `unstable run`, with its help, grouped by purpose. Generated from the code (RunConfig in "
    "unstable_core/config/ and the installed learners' algorithm options): do not edit it by hand, run",
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


def _vllm_options_note(vllm_options: Iterable[str]) -> list[str]:
    options = ", ".join(sorted(vllm_options))
    return comment(f"the vllm backend's options (vllm_config.NAME = value): {options}")


def run_settings(vllm_options: Iterable[str]) -> Iterator[str]:
    for field in attrs.fields(RunConfig):
        section = field.metadata.get("section")
        if section:
            yield ""
            yield from comment(f"---- {section}")
        yield ""
        yield from setting(field)
        if field.name == "vllm_config":
            yield from _vllm_options_note(vllm_options)
        if field.name == "algorithm_config":
            yield "#   each installed learner's options are at the end of this file"


@attrs.frozen
class LearnerOptions:
    """A learner's algorithm options as the reference lists them: its `algorithm_config_class` (None when
    it declares none), and whether its `initialize_algorithm` takes options of its own all the same."""

    name: str
    config_class: type | None
    undeclared: bool = False


def learner_settings(learners: Sequence[LearnerOptions]) -> Iterator[str]:
    """Each learner's algorithm options (attrs fields with a `help`), commented out: uncomment those of the
    learner you choose."""
    yield ""
    yield from comment(
        "---- algorithm_config of each installed learner: only the chosen learner's options are allowed; "
        "uncomment those you change"
    )
    for learner in learners:
        yield ""
        config_cls = learner.config_class
        if config_cls is None:
            own = "options of its own, undeclared" if learner.undeclared else "no options"
            yield from comment(f"{learner.name}: {own}")
            continue
        yield from comment(f"{learner.name} (learner = {json.dumps(learner.name)}): {config_cls.__name__}")
        for field in attrs.fields(config_cls):
            yield from comment(field.metadata.get("help", ""), "#   ") if field.metadata.get("help") else []
            default = _default(field)
            key = f"algorithm_config.{field.name}"
            yield f"# {key} = {toml_value(default)}" if default is not None else f"# {key} = ...  (null)"


def reference_toml(learners: Sequence[LearnerOptions], vllm_options: Iterable[str]) -> str:
    """The reference TOML: RunConfig's fields (`vllm_options`: the vllm backend's), then `learners`' options."""
    lines = [
        line for text in HEADER for line in (comment(text) if not text.startswith(" ") else [f"# {text}"])
    ]
    lines += run_settings(vllm_options)
    lines += learner_settings(learners)
    return "\n".join(lines) + "\n"
