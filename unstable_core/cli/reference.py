"""`python -m unstable_core.cli.reference`: writes the all-options reference TOML (`examples/reference.toml`)
from the code, with every installed learner's options and the vllm backend's; `--check FILE` fails when
FILE differs from it."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from unstable_core.config.reference import COMMAND, LearnerOptions, reference_toml


def installed_learners() -> list[LearnerOptions]:
    """The options of every learner the installed plugins register, by name."""
    from unstable_core.learners.base import BaseLearner
    from unstable_core.plugins import get_registry

    out = []
    for component in get_registry().by_kind("learner"):
        cls = component.load()
        own = cls.initialize_algorithm is not BaseLearner.initialize_algorithm
        out.append(LearnerOptions(component.name, getattr(cls, "algorithm_config_class", None), own))
    return out


def installed_reference() -> str:
    """The reference TOML of this installation."""
    from unstable_core.inference.vllm.backend import vllm_backend_options

    return reference_toml(installed_learners(), vllm_backend_options())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    text = installed_reference()
    if args[:1] == ["--check"] and len(args) == 2:
        with open(args[1], encoding="utf-8") as f:
            if f.read() != text:
                print(f"{args[1]} differs from the code: regenerate it with `{COMMAND}`", file=sys.stderr)
                return 1
        return 0
    if args:
        print("usage: python -m unstable_core.cli.reference [--check FILE]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
