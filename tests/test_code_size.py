"""No function or method in the repository is over 80 lines: one that is holds more than one job."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80
FOLDERS = ("unstable_core", "plugins", "benchmarks", "examples", "tests")


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


def test_no_function_is_over_80_lines():
    assert long_functions(ROOT, MAX_FUNCTION_LINES) == []


def test_a_long_function_is_found(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "long.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert long_functions(tmp_path, MAX_FUNCTION_LINES) == ["benchmarks/long.py:5 long (81 lines)"]
