"""The README and the pages of docs/ against the code.

- the README is short (at most 250 lines) and maps every page of docs/; every link stays in the repository;
- every `unstable ...` command they show names a real command and only options it has (click's own parser,
  without running anything), and so does every `python3 benchmarks/...` and `./install.sh ...` command;
- every `--option` they name is an option of a command (or of install.sh or a benchmark script);
- every hook they name is a hook of `unstable_core/hookspecs.py`, with the argument names of its spec, and
  the hook list of docs/writing-a-plugin.md is exactly the hook specs;
- every setting they write as a TOML key (`key = value`, a ```toml block, `unstable_core.build(key=...)`)
  is one the run configuration takes (or an option of the component, env table or vLLM engine it belongs
  to);
- every repository path they quote exists, and the layout of docs/architecture.md is the tree.
"""

from __future__ import annotations

import ast
import fnmatch
import inspect
import re
import shlex
from functools import cache
from pathlib import Path

import attrs
import click
import pluggy
import pytest

from unstable_core import hookspecs

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
ALL_PAGES = [README, *PAGES]
README_MAX_LINES = 250
# the pages issue 35 asked for; more may come, each linked from the README's map
REQUIRED_PAGES = {
    "architecture.md",
    "benchmarks.md",
    "evaluation.md",
    "games-and-tasks.md",
    "gpus-and-clusters.md",
    "learning-semantics.md",
    "resume-and-failures.md",
    "writing-a-plugin.md",
}
PLUGIN_PAGE = DOCS / "writing-a-plugin.md"
LAYOUT_PAGE = DOCS / "architecture.md"

# a path into the repository, as the pages write it: `unstable_core/games/loop.py`, `plugins/*/`
REPO_PATH = re.compile(
    r"(?<![\w./<>~-])((?:unstable_core|plugins|tests|benchmarks|examples|docs)/[\w./*<>-]*)"
)
FENCE = re.compile(r"^ {0,4}```(\w*)[^\n]*\n(.*?)^ *```", re.MULTILINE | re.DOTALL)  # also in a list item
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)  # CommonMark: closed by a run of the same length
HOOK_ITEM = re.compile(r"^- `(\w+)`:\s*(\S.*)$")
LINK = re.compile(r"\]\(([^)\s]+)\)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*\*?")  # `--api-*`: every option so named
HOOK_NAME = re.compile(r"\bregister_[a-z]\w*")
HOOK_CALL = re.compile(r"\b(register_[a-z]\w*)\(([^()]*)\)")
TOML_KEY = re.compile(r"^([a-z_][a-z0-9_]*)\s*=(?!=)\s")  # a span that is `key = value`
TABLE_KEY = re.compile(r"[{,]\s*([a-z_][a-z0-9_]*)\s*=(?!=)\s")  # a key of a span that is an inline table
SHELL_OPERATORS = {"&&", "||", "|", ";", "&", ">", ">>", "2>", "<"}
# programs whose options are not ours: a span or a line that starts with one of them is not checked
OTHER_PROGRAMS = {"ray", "llama-server", "vllm", "pip", "pytest", "export", "source", ".", "git"}
# spans written as `key = value` that are no setting, with the reason
NOT_SETTINGS = {
    "x = 5": "an answer the math checker reads (docs/games-and-tasks.md)",
}


# ---- reading the pages


def text_of(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def fences(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block."""
    return FENCE.findall(text)


def spans(text: str) -> list[str]:
    """The inline code spans, outside fenced blocks, with line breaks as spaces."""
    return [" ".join(m.group(2).split()) for m in CODE_SPAN.finditer(FENCE.sub("", text))]


def code_of(text: str) -> list[str]:
    """Everything written as code: fenced blocks and inline spans."""
    return [body for _, body in fences(text)] + spans(text)


def shell_lines(body: str) -> list[str]:
    """A shell block's commands, one a line, with `\\` continuations joined."""
    return body.replace("\\\n", " ").splitlines()


def commands_in(page: Path) -> list[list[str]]:
    """Every command line of a shell block or inline span, as words, split at shell operators and with
    leading `VAR=value` words dropped."""
    text = text_of(page)
    lines = [
        line
        for lang, body in fences(text)
        if lang in ("", "bash", "sh", "shell", "console")
        for line in shell_lines(body)
    ]
    lines += spans(text)
    commands = []
    for line in lines:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote: not a command line (output, a message)
            assert not line.lstrip().startswith("unstable "), f"{page_id(page)}: cannot split {line!r}"
            continue
        segment: list[str] = []
        for word in [*words, "&&"]:
            if word in SHELL_OPERATORS:
                while segment and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", segment[0]):
                    segment.pop(0)
                if segment:
                    commands.append(segment)
                segment = []
            else:
                segment.append(word)
    return commands


def elided(words: list[str]) -> list[str]:
    """Words up to a `...` that stands for the rest."""
    return words[: words.index("...")] if "..." in words else words


def section(text: str, title: str) -> str:
    """The body of the `## title` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"no section '## {title}'"
    return match.group(1)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", text_of(page))
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


# ---- what the code has


@cache
def unstable_cli() -> click.Group:
    """The `unstable` group with the core's commands and every installed plugin's."""
    from unstable_core.cli.main import cli
    from unstable_core.plugins import add_commands

    add_commands(cli)
    return cli


def option_names(command: click.Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return names


@cache
def script_options(script: str) -> frozenset[str]:
    """The options a benchmark script's argparse declares, or install.sh's `case` takes."""
    source = (ROOT / script).read_text(encoding="utf-8")
    if script.endswith(".sh"):
        return frozenset(re.findall(r"^\s*(--[\w-]+)\)", source, re.MULTILINE))
    return frozenset(re.findall(r"[\"'](--[\w-]+)[\"']", source))


@cache
def every_option() -> frozenset[str]:
    """Every option a page may name: those of `unstable` and its commands, of install.sh and of the
    benchmark scripts."""
    cli = unstable_cli()
    names = option_names(cli)
    for command in cli.commands.values():
        names |= option_names(command)
    names |= script_options("install.sh")
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        names |= script_options(str(script.relative_to(ROOT)))
    return frozenset(names)


def spec_hooks() -> set[str]:
    """The hooks `unstable_core/hookspecs.py` marks with its `hookspec` marker, as pluggy collects them."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return {name for name in vars(pm.hook) if not name.startswith("_")}


def is_config_key(key: str) -> bool:
    """A key the run configuration takes: a RunConfig field, or a name it reads for one (UnstableBaselines
    v0.2's `algorithm`, ...). Asked of the config loader itself, so that wherever the names live, the
    answer is the loader's."""
    from unstable_core.config import config_from_dict
    from unstable_core.errors import ConfigError

    try:
        config_from_dict({key: None})  # None: the default, so only the name is checked
    except ConfigError as exc:
        if "unknown" in str(exc):
            return False
        raise
    return True


def _field_names(target: object) -> set[str]:
    if attrs.has(target):
        return {f.name for f in attrs.fields(target)}
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return set()
    return {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


@cache
def nested_keys() -> frozenset[str]:
    """Keys of the tables a setting holds: a train or eval env table's, a registered sampler's or reward
    transform's options, a learner's algorithm config, and the vLLM engine's (the backend's own options
    and the engine arguments it sets)."""
    from unstable_core.inference.vllm.backend import vllm_backend_options
    from unstable_core.plugins import get_registry
    from unstable_core.types import EvalEnvSpec, TrainEnvSpec

    keys = _field_names(TrainEnvSpec) | _field_names(EvalEnvSpec)
    registry = get_registry()
    for kind in ("env_sampler", "model_sampler", "reward_transform"):
        for component in registry.by_kind(kind):
            keys |= _field_names(component.load())
    for component in registry.by_kind("learner"):
        config_cls = getattr(component.load(), "algorithm_config_class", None)
        if config_cls is not None:
            keys |= _field_names(config_cls)
    keys |= vllm_backend_options()
    vllm_source = (ROOT / "unstable_core/inference/vllm/backend.py").read_text(encoding="utf-8")
    keys |= set(re.findall(r"[\"'](\w+)[\"']", vllm_source))
    return frozenset(keys)


def build_keywords() -> set[str]:
    """What `unstable_core.build` takes beside the config keys."""
    from unstable_core.runtime.run import build

    params = inspect.signature(build).parameters
    return {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


# ---- the README and its map


def test_readme_is_short():
    lines = text_of(README).splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_maps_every_docs_page():
    linked = {t.split("#")[0] for t in LINK.findall(text_of(README)) if t.startswith("docs/")}
    pages = {f"docs/{p.name}" for p in PAGES}
    assert {f"docs/{name}" for name in REQUIRED_PAGES} <= pages, "a required docs/ page is missing"
    assert pages <= linked, f"docs/ pages the README's map does not link: {sorted(pages - linked)}"
    missing = sorted(t for t in linked if not (ROOT / t).exists())
    assert not missing, f"README.md links docs/ pages that do not exist: {missing}"


def test_readme_points_only_into_the_repository():
    """Every link of the README is a file of this repository, never a web address or a path outside."""
    outside = [t for t in LINK.findall(text_of(README)) if not _inside(README, t)]
    assert not outside, f"README.md links outside the repository: {outside}"


def test_ci_runs_the_readme_test_command():
    """The README's two set-up commands, exactly; .ci/run runs the same test command (and the vLLM one
    of docs/gpus-and-clusters.md), in the foreground or beside the other."""
    setup = section(text_of(README), "Set-up")
    assert "```bash\n./install.sh && unstable run\n```" in setup
    assert "```bash\n./install.sh --test && python3 -m pytest -q\n```" in setup
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
    for line in (
        "./install.sh --test",
        "python3 -m pytest -q",
        "./install.sh --test --vllm",
        "python3 -m pytest -q -n 0 -m vllm",
    ):
        assert line in ci or f"{line} &" in ci, f".ci/run does not run {line!r}"
    vllm = text_of(DOCS / "gpus-and-clusters.md")
    assert "./install.sh --test --vllm && python3 -m pytest -q -n 0 -m vllm" in vllm


# ---- links and paths, every page


def _inside(page: Path, target: str) -> bool:
    """A link target that is a file of the repository (and, with `#anchor`, a heading of it)."""
    path, _, anchor = target.partition("#")
    if re.match(r"[a-z]+:", path) or path.startswith(("/", "~")):
        return False
    file = (page.parent / path).resolve() if path else page
    if ROOT not in file.parents or not file.exists():
        return False
    return not anchor or file.suffix != ".md" or anchor in anchors(file)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_docs_links_stay_in_the_repository(page):
    """A link is a web address or a file of the repository (with its heading), never a path outside."""
    targets = LINK.findall(text_of(page))
    outside = [t for t in targets if not re.match(r"https?://", t) and not _inside(page, t)]
    assert not outside, (
        f"{page_id(page)} links to files outside the repository or to missing headings: {outside}"
    )


def quoted_paths(text: str) -> set[str]:
    """Repository paths inside code spans and fenced code blocks."""
    return {p.rstrip(".,:;") for code in code_of(text) for p in REPO_PATH.findall(code)}


def exists(path: str) -> bool:
    pattern = re.sub(r"<[^>/]*>", "*", path)  # `runs/<name>`-style placeholders match any name
    if "*" in pattern:
        return any(ROOT.glob(pattern.rstrip("/")))
    return (ROOT / pattern).exists()


@pytest.mark.parametrize("page", ALL_PAGES, ids=page_id)
def test_quoted_paths_exist(page):
    missing = sorted(p for p in quoted_paths(text_of(page)) if not exists(p))
    assert not missing, f"{page_id(page)} names paths that are not in the repository: {missing}"


def test_path_extraction_finds_paths():
    assert "unstable_core/hookspecs.py" in quoted_paths(text_of(PLUGIN_PAGE))
    assert not exists("unstable_core/no_such_module.py")


def layout_entries(text: str) -> list[str]:
    """The paths of the tree in 'Layout' of docs/architecture.md: a name at two spaces per level,
    its description from the column where the first entry's begins (lines there continue it)."""
    body = fences(section(text, "Layout"))[0][1]
    first = body.splitlines()[0]
    column = len(first) - len(first.split(None, 1)[1])
    stack: list[str] = []
    paths = []
    for line in body.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent >= column:
            continue
        assert indent % 2 == 0, f"docs/architecture.md layout: odd indentation in {line!r}"
        name = line.split()[0]
        stack[indent // 2 :] = [name.rstrip("/")]
        paths.append("/".join(stack) + ("/" if name.endswith("/") else ""))
    return paths


def test_layout_is_the_tree():
    entries = layout_entries(text_of(LAYOUT_PAGE))
    assert "unstable_core/runtime/launch/" in entries  # the parser sees nesting
    missing = [p for p in entries if not (ROOT / p).exists() or p.endswith("/") != (ROOT / p).is_dir()]
    assert not missing, f"docs/architecture.md's layout names what the tree does not have: {missing}"
    packages = {
        p.name for p in (ROOT / "unstable_core").iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    listed = {
        p.split("/")[1]
        for p in entries
        if p.startswith("unstable_core/") and p.count("/") == 2 and p.endswith("/")
    }
    assert packages <= listed, (
        f"subpackages of unstable_core the layout leaves out: {sorted(packages - listed)}"
    )


# ---- commands and options


def check_unstable(words: list[str]) -> str | None:
    """Why `unstable WORDS...` is not a command line of ours, or None. Parsed by click's own parser of
    the group and of the command, so an unknown option, an option without its value or too many
    arguments is caught, and nothing runs."""
    cli = unstable_cli()
    args = elided(words[1:])
    # prose names an option of a command as `unstable play --opponent`: the last option needs no value
    named = args.pop() if len(args) > 1 and args[-1].startswith("--") else None
    try:
        _, rest, _ = cli.make_parser(click.Context(cli, info_name="unstable")).parse_args(args=list(args))
        if not rest:
            return None  # `unstable --help`, `unstable --debug ...`
        name, *rest = rest
        if name not in cli.commands:
            return f"no command {name!r} (commands: {', '.join(sorted(cli.commands))})"
        command = cli.commands[name]
        _, extra, _ = command.make_parser(click.Context(command, info_name=name)).parse_args(args=rest)
    except click.UsageError as exc:
        return exc.format_message()
    if named and named.split("=")[0] not in option_names(command):
        return f"No such option: {named}"
    return f"unexpected arguments {extra}" if extra else None


def check_script(words: list[str]) -> str | None:
    """Why `python3 benchmarks/X.py ...` or `./install.sh ...` is not a command line of ours, or None."""
    script = words[1] if words[0].startswith("python") else words[0].removeprefix("./")
    if not (ROOT / script).is_file():
        return f"no script {script}"
    unknown = [
        w.split("=")[0]
        for w in elided(words)
        if w.startswith("--") and w.split("=")[0] not in script_options(script)
    ]
    return f"{script} has no option {unknown}" if unknown else None


def our_commands(page: Path) -> list[tuple[list[str], str | None]]:
    """(words, why not) of each command line of ours on a page."""
    out = []
    for words in commands_in(page):
        if words[0] == "unstable":
            out.append((words, check_unstable(words)))
        elif words[0] == "./install.sh" or (
            words[0].startswith("python") and len(words) > 1 and words[1].startswith("benchmarks/")
        ):
            out.append((words, check_script(words)))
    return out


@pytest.mark.parametrize("page", ALL_PAGES, ids=page_id)
def test_commands_are_real(page):
    bad = [f"{shlex.join(words)}: {why}" for words, why in our_commands(page) if why]
    assert not bad, f"{page_id(page)} shows commands that do not parse:\n" + "\n".join(bad)


def test_command_check_sees_a_change():
    assert check_unstable(["unstable", "run", "--learning-steps", "3", "--help"]) is None
    assert check_unstable(["unstable", "--debug", "..."]) is None
    assert check_unstable(["unstable", "eval", "runs/<name>", "--opponent", "random", "--json"]) is None
    assert "no command" in check_unstable(["unstable", "train"])
    assert "--learning-step" in check_unstable(["unstable", "run", "--learning-step", "3"])
    assert check_unstable(["unstable", "play", "--opponent"]) is None  # prose naming an option
    assert "--opponents" in check_unstable(["unstable", "play", "--opponents"])
    assert "unexpected" in check_unstable(["unstable", "run", "--seed", "1", "extra"])
    assert "unexpected" in check_unstable(["unstable", "leaderboard", "a", "b"])
    assert check_script(["python3", "benchmarks/learning.py", "--minutes", "5"]) is None
    assert "no option" in check_script(["python3", "benchmarks/learning.py", "--hours", "5"])
    assert "no option" in check_script(["./install.sh", "--gpu"])
    assert check_script(["./install.sh", "--test", "--vllm"]) is None


def test_every_page_shows_commands():
    """The extraction works: the README shows the set-up and everyday commands, each page of
    commands its own."""
    shown = {page.name: [w for w, _ in our_commands(page)] for page in ALL_PAGES}
    assert ["./install.sh"] in shown["README.md"] and ["unstable", "run"] in shown["README.md"]
    for name in ("evaluation.md", "games-and-tasks.md", "gpus-and-clusters.md", "benchmarks.md"):
        assert shown[name], f"found no command in docs/{name}"


def options_named(page: Path) -> list[str]:
    """The `--options` a page names in code outside a command line of another program."""
    text = text_of(page)
    named = []
    for span in spans(text):
        words = span.split()
        if words and (words[0] in OTHER_PROGRAMS or words[0] in ("unstable", "./install.sh", "python3")):
            continue  # a command line: checked whole by test_commands_are_real, or another program's
        named += OPTION.findall(span)
    return named


@pytest.mark.parametrize("page", ALL_PAGES, ids=page_id)
def test_options_exist(page):
    unknown = sorted({o for o in options_named(page) if not fnmatch.filter(every_option(), o)})
    assert not unknown, f"{page_id(page)} names options that no command has: {unknown}"


def test_option_check_sees_a_change():
    assert {"--learning-steps", "--opponent", "--debug", "--vllm", "--minutes"} <= every_option()
    assert "--learning-step" not in every_option()
    assert fnmatch.filter(every_option(), "--api-*") and not fnmatch.filter(every_option(), "--apy-*")


# ---- hooks


def plugin_page_hooks(text: str) -> list[str]:
    """The hook names of the bullet list that follows 'The hooks' in docs/writing-a-plugin.md."""
    start = text.find("The hooks")
    assert start >= 0, "docs/writing-a-plugin.md has no 'The hooks' list"
    names: list[str] = []
    in_list = False
    for line in text[start:].splitlines()[1:]:
        if line.startswith("- "):
            match = HOOK_ITEM.match(line)
            assert match, (
                f"docs/writing-a-plugin.md hook list: expected '- `name`: description', got {line!r}"
            )
            names.append(match.group(1))
            in_list = True
        elif in_list and not line.startswith("  "):  # a blank line or prose ends the list
            break
    return names


def test_plugin_page_lists_every_hook_and_no_other():
    listed = plugin_page_hooks(text_of(PLUGIN_PAGE))
    specs = spec_hooks()
    assert specs, "found no hook specs in unstable_core/hookspecs.py"
    assert len(listed) == len(set(listed)), f"docs/writing-a-plugin.md lists a hook twice: {sorted(listed)}"
    assert set(listed) == specs, (
        f"hooks in unstable_core/hookspecs.py but not in docs/writing-a-plugin.md: {sorted(specs - set(listed))}; "
        f"in docs/writing-a-plugin.md but not in hookspecs.py: {sorted(set(listed) - specs)}"
    )


def test_hook_list_parser_sees_a_change():
    text = text_of(PLUGIN_PAGE)
    extra = text.replace(
        "- `register_commands`:", "- `register_widgets`: widgets.\n- `register_commands`:", 1
    )
    assert set(plugin_page_hooks(extra)) == spec_hooks() | {"register_widgets"}
    dropped = "\n".join(line for line in text.splitlines() if not line.startswith("- `register_learners`:"))
    assert set(plugin_page_hooks(dropped)) == spec_hooks() - {"register_learners"}


def hook_mentions(text: str) -> tuple[set[str], list[tuple[str, list[str]]]]:
    """Hook names written as code, and those written with arguments: `register_envs(register)`."""
    code = code_of(text)
    names = {n for c in code for n in HOOK_NAME.findall(c)}
    calls = []
    for c in code:
        for name, args in HOOK_CALL.findall(c):
            calls.append((name, [re.split(r"[:=]", a)[0].strip() for a in args.split(",") if a.strip()]))
    return names, calls


def hook_errors(text: str) -> list[str]:
    names, calls = hook_mentions(text)
    specs = spec_hooks()
    errors = [f"{n} is not a hook" for n in sorted(names - specs)]
    for name, args in calls:
        if name in specs:
            expected = list(inspect.signature(getattr(hookspecs, name)).parameters)
            if args != expected:
                errors.append(f"{name}({', '.join(args)}): the spec's arguments are ({', '.join(expected)})")
    return errors


@pytest.mark.parametrize("page", ALL_PAGES, ids=page_id)
def test_hooks_named_are_hooks_with_their_arguments(page):
    errors = hook_errors(text_of(page))
    assert not errors, f"{page_id(page)}: " + "; ".join(errors)


def test_hook_check_sees_a_change():
    names, calls = hook_mentions(text_of(PLUGIN_PAGE))
    assert "register_reward_transforms" in names and ("register_envs", ["register"]) in calls
    assert hook_errors("`register_envs(register)` and `register_commands(cli)`") == []
    assert hook_errors("`register_widgets(register)`") == ["register_widgets is not a hook"]
    assert hook_errors("```python\ndef register_envs(reg):\n```") == [
        "register_envs(reg): the spec's arguments are (register)"
    ]


def test_register_callback_as_documented():
    """`register(name, target, description="")`, as the plugin page writes it, is the callback's signature."""
    text = text_of(PLUGIN_PAGE)
    written = re.search(r"`register\(([^`]*)\)` callback", " ".join(text.split()))
    assert written, "docs/writing-a-plugin.md does not write the register callback's signature"
    params = [
        p for p in inspect.signature(hookspecs.Register.__call__).parameters if p not in ("self", "options")
    ]
    assert [a.split("=")[0].strip() for a in written.group(1).split(",")] == params


# ---- settings


def toml_keys(text: str) -> list[str]:
    """The settings a page writes as TOML: `key = value` spans, top-level keys of ```toml blocks (keys
    under a [table] are another file's, such as pyproject.toml's), keywords of `unstable_core.build(...)`."""
    keys = []
    for span in spans(text):
        if span not in NOT_SETTINGS:
            keys += (TABLE_KEY if span.startswith("{") else TOML_KEY).findall(span)
    for lang, body in fences(text):
        if lang == "toml":
            top = re.split(r"^\[", body, maxsplit=1, flags=re.MULTILINE)[0]
            keys += re.findall(r"^([A-Za-z_][\w-]*)\s*=", top, re.MULTILINE)
    return keys


def build_calls(text: str) -> list[list[str]]:
    """The keyword names of each `unstable_core.build(...)` call in Python blocks and spans."""
    sources = [body for lang, body in fences(text) if lang == "python"] + [
        s for s in spans(text) if "build(" in s
    ]
    calls = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "unstable_core.build":
                calls.append([k.arg for k in node.keywords if k.arg])
    return calls


@pytest.mark.parametrize("page", ALL_PAGES, ids=page_id)
def test_settings_named_exist(page):
    text = text_of(page)
    unknown = sorted({k for k in toml_keys(text) if not is_config_key(k) and k not in nested_keys()})
    extra = build_keywords()
    unknown += sorted(
        {k for call in build_calls(text) for k in call if k not in extra and not is_config_key(k)}
    )
    assert not unknown, f"{page_id(page)} names settings the run configuration does not take: {unknown}"


def test_setting_check_sees_a_change():
    assert is_config_key("batch_size") and is_config_key("algorithm")  # a field, a v0.2 name
    assert not is_config_key("batch_sise")
    assert "ema_alpha" in nested_keys() and "env_id" in nested_keys()
    assert toml_keys("`batch_size = 8` and `x = 5`, `(p = 0.01)`") == ["batch_size"]
    assert toml_keys('`{ env_id = "arithmetic-3", prompt_template = "..." }`') == [
        "env_id",
        "prompt_template",
    ]
    assert toml_keys("```toml\nlearning_rate = 1e-5\n[project]\nname = 'x'\n```") == ["learning_rate"]
    assert build_calls('`unstable_core.build(resume="runs/x")`') == [["resume"]]
    assert "resume" in build_keywords()
