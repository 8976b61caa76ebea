"""No function or method in the repository is over 80 lines, and no module of the code (tests aside) over 500:
one that is holds more than one job."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500
FOLDERS = ("unstable_core", "plugins", "benchmarks", "examples", "tests")
CODE_FOLDERS = ("unstable_core", "plugins", "benchmarks", "examples")  # the modules held to 500 lines


def long_functions(root: Path, limit: int) -> list[str]:
    """`path:line name (n lines)` of each function over `limit` lines under `root`'s source folders."""
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def long_modules(root: Path, limit: int) -> list[str]:
    """`path (n lines)` of each module over `limit` lines under `root`'s code folders."""
    found = []
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > limit:
                found.append(f"{path.relative_to(root)} ({lines} lines)")
    return found


def test_no_function_is_over_80_lines():
    assert long_functions(ROOT, MAX_FUNCTION_LINES) == []


def test_a_long_function_is_found(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "long.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert long_functions(tmp_path, MAX_FUNCTION_LINES) == ["benchmarks/long.py:5 long (81 lines)"]


def test_no_module_is_over_500_lines():
    assert long_modules(ROOT, MAX_MODULE_LINES) == []


def test_a_long_module_is_found(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "benchmarks" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules(tmp_path, MAX_MODULE_LINES) == ["benchmarks/long.py (501 lines)"]
