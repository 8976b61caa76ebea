"""runtime/'s written rule (docs/architecture.md, "What runtime/ may import"): each sub-room imports only
the rooms below it. Every import is read from the source, those inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[1] / "unstable_core" / "runtime"
PACKAGE = "unstable_core.runtime"

#: room -> the rooms of runtime/ it may import (the table in docs/architecture.md)
MAY_IMPORT = {
    "run": {"launch", "recovery", "actors", "graph", "run_dir"},
    "launch": {"recovery", "actors", "graph", "run_dir"},
    "actors": {"recovery", "run_dir"},
    "recovery": {"graph", "run_dir"},
    "graph": set(),
    "run_dir": set(),
}


def room_of(module: str) -> str | None:
    """The sub-room of runtime/ that a dotted module name lies in, or None outside runtime/."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    parts = module[len(PACKAGE) + 1 :].split(".")
    return parts[0] or None


def imported_modules(source: str) -> list[str]:
    """Every module an absolute import of `source` names, at any depth (`from a import b` gives a and a.b)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def broken_rules(root: Path = RUNTIME) -> list[str]:
    """`file -> module` for each import inside runtime/ that the table does not allow."""
    broken = []
    for path in sorted(root.rglob("*.py")):
        own = path.relative_to(root).parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        for module in imported_modules(path.read_text()):
            room = room_of(module)
            if room is not None and room != own and room not in MAY_IMPORT[own]:
                broken.append(f"{path.relative_to(root)} -> {module}")
    return sorted(set(broken))


def test_every_room_of_runtime_has_a_rule():
    rooms = {p.name.removesuffix(".py") for p in RUNTIME.iterdir() if p.suffix == ".py" or p.is_dir()}
    rooms -= {"__init__", "__pycache__"}
    assert rooms == set(MAY_IMPORT)


def test_runtime_imports_only_downward():
    assert broken_rules() == []


@pytest.mark.parametrize(
    ("room", "line"),
    [
        ("actors", "from unstable_core.runtime.launch.placement import placed_on"),
        ("recovery", "from unstable_core.runtime.actors.graph import ActorGraph"),
        ("actors", "def f():\n    from unstable_core.runtime import graph\n"),
    ],
)
def test_the_check_sees_an_import_upward(tmp_path, room, line):
    for name in MAY_IMPORT:
        (tmp_path / name).mkdir()
    (tmp_path / room / "x.py").write_text(line)
    broken = broken_rules(tmp_path)
    assert broken and all(b.startswith(f"{room}/x.py -> ") for b in broken)
