"""The README against the code: its list of hooks is the hook specs, and every repository path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

import pluggy

from unstable_core import hookspecs

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# a path into the repository, as the README writes it: `unstable_core/games/loop.py`, `plugins/*/`
REPO_PATH = re.compile(
    r"(?<![\w./<>~-])((?:unstable_core|plugins|tests|benchmarks|examples|docs)/[\w./*<>-]*)"
)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)  # CommonMark: closed by a run of the same length
HOOK_ITEM = re.compile(r"^- `(\w+)`:\s*(\S.*)$")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    """The body of the `## title` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no section '## {title}'"
    return match.group(1)


def readme_hooks(text: str) -> list[str]:
    """The hook names of the bullet list that follows 'The hooks' in 'Write a plugin'."""
    body = section(text, "Write a plugin")
    start = body.find("The hooks")
    assert start >= 0, "README.md's 'Write a plugin' has no 'The hooks' list"
    names: list[str] = []
    in_list = False
    for line in body[start:].splitlines()[1:]:
        if line.startswith("- "):
            match = HOOK_ITEM.match(line)
            assert match, f"README.md hook list: expected '- `name`: description', got {line!r}"
            names.append(match.group(1))
            in_list = True
        elif in_list and not line.startswith("  "):  # a blank line or prose ends the list
            break
    return names


def spec_hooks() -> set[str]:
    """The hooks `unstable_core/hookspecs.py` marks with its `hookspec` marker, as pluggy collects them."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return {name for name in vars(pm.hook) if not name.startswith("_")}


def quoted_paths(text: str) -> set[str]:
    """Repository paths inside code spans and fenced code blocks."""
    quoted = FENCE.findall(text)
    quoted += [m.group(2) for m in CODE_SPAN.finditer(FENCE.sub("", text))]
    return {p.rstrip(".,:;") for q in quoted for p in REPO_PATH.findall(q)}


def exists(path: str) -> bool:
    pattern = re.sub(r"<[^>/]*>", "*", path)  # `runs/<name>`-style placeholders match any name
    if "*" in pattern:
        return any(ROOT.glob(pattern.rstrip("/")))
    return (ROOT / pattern).exists()


def test_readme_lists_every_hook_and_no_other():
    listed = readme_hooks(readme())
    specs = spec_hooks()
    assert specs, "found no hook specs in unstable_core/hookspecs.py"
    assert len(listed) == len(set(listed)), f"README.md lists a hook twice: {sorted(listed)}"
    assert set(listed) == specs, (
        f"hooks in unstable_core/hookspecs.py but not in README.md: {sorted(specs - set(listed))}; "
        f"in README.md but not in hookspecs.py: {sorted(set(listed) - specs)}"
    )


def test_hook_list_parser_sees_a_change():
    text = readme()
    extra = text.replace(
        "- `register_commands`:", "- `register_widgets`: widgets.\n- `register_commands`:", 1
    )
    assert set(readme_hooks(extra)) == spec_hooks() | {"register_widgets"}
    dropped = "\n".join(line for line in text.splitlines() if not line.startswith("- `register_learners`:"))
    assert set(readme_hooks(dropped)) == spec_hooks() - {"register_learners"}


def test_readme_paths_exist():
    paths = quoted_paths(readme())
    assert "unstable_core/hookspecs.py" in paths  # the extraction finds paths at all
    missing = sorted(p for p in paths if not exists(p))
    assert not missing, f"README.md names paths that are not in the repository: {missing}"


def test_readme_links_stay_in_the_repository():
    """A Markdown link is a web address or a file of the repository, never a path outside it."""
    targets = re.findall(r"\]\(([^)\s]+)\)", readme())
    local = [t for t in targets if not re.match(r"https?://", t)]
    outside = [
        t for t in local if t.startswith(("/", "~")) or ".." in Path(t).parts or not (ROOT / t).exists()
    ]
    assert not outside, f"README.md links to files outside the repository: {outside}"
