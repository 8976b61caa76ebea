"""Where task items come from, all usable offline: the generated arithmetic task, JSONL files and (when
`datasets` is installed and the hub or a local copy is reachable) Hugging Face datasets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from unstable_core.config.envs import HF_PREFIX
from unstable_core.envs.arithmetic import make_problem
from unstable_core.envs.tasks import Task, TaskItem
from unstable_core.errors import ConfigError

PROMPT_COLUMNS = ("prompt", "question", "problem", "input")
ANSWER_COLUMNS = ("answer", "solution", "output", "target")


class ArithmeticTask(Task):
    """Multi-step integer arithmetic, generated (no download): item i of difficulty d is always the same."""

    def __init__(self, difficulty: int = 2, seed: int = 0) -> None:
        make_problem(0, difficulty, seed)  # a bad difficulty raises here, before any game
        self.difficulty, self.seed = difficulty, seed

    def item(self, index: int) -> TaskItem:
        question, answer = make_problem(index, self.difficulty, self.seed)
        return TaskItem(question, answer, f"arithmetic-{self.difficulty}:{index}")


class ItemsTask(Task):
    """A task of a fixed list of items (a file or a dataset), in their order."""

    def __init__(self, items: list[TaskItem], source: str) -> None:
        if not items:
            raise ConfigError(f"task {source} has no items; give a file or dataset with at least one")
        self.items, self.source, self.size = items, source, len(items)

    def item(self, index: int) -> TaskItem:
        return self.items[index % len(self.items)]


def jsonl_task(path: str | Path) -> ItemsTask:
    """A task from a JSONL file: one JSON object per line with a `prompt` and an `answer` (a string or a
    number); blank lines are skipped. A bad record is a ConfigError naming its line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"task file {path} cannot be read ({exc}); give a UTF-8 JSONL file") from None
    items = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc.msg}); each line is one JSON object") from None
        if not isinstance(record, dict):
            raise ConfigError(f"{where}: a {type(record).__name__}, not a JSON object with prompt and answer")
        items.append(_item(record, "prompt", "answer", where))
    return ItemsTask(items, str(path))


def _item(record: dict[str, Any], prompt_key: str, answer_key: str, where: str) -> TaskItem:
    missing = [k for k in (prompt_key, answer_key) if k not in record]
    if missing:
        raise ConfigError(
            f"{where}: no {' and no '.join(repr(m) for m in missing)} field; the fields are "
            f"{', '.join(map(repr, record)) or 'none'}"
        )
    prompt, answer = record[prompt_key], record[answer_key]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f"{where}: {prompt_key!r} must be non-empty text, got {prompt!r}")
    if isinstance(answer, bool) or not isinstance(answer, str | int | float) or not str(answer).strip():
        raise ConfigError(f"{where}: {answer_key!r} must be non-empty text or a number, got {answer!r}")
    return TaskItem(prompt, str(answer), where)


def parse_hf_id(env_id: str) -> tuple[str, dict[str, str]]:
    """`hf:NAME[?config=C&split=S&prompt=COL&answer=COL]` -> (NAME, options)."""
    name, _, query = env_id[len(HF_PREFIX) :].partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - {"config", "split", "prompt", "answer"})
    if not name or unknown:
        raise ConfigError(
            f"task {env_id!r}: expected hf:DATASET[?config=C&split=S&prompt=COLUMN&answer=COLUMN]"
            + (f"; unknown option(s) {', '.join(unknown)}" if unknown else "")
        )
    return name, options


def hf_task(env_id: str) -> ItemsTask:
    """A task from a Hugging Face dataset (a hub id or a local folder): `datasets.load_dataset(NAME, config,
    split=split)`, split default `test`, columns default the first of `prompt/question/problem/input` and
    `answer/solution/output/target`. A worked solution as the answer is fine (the checker reads its last
    `\\boxed{}` or GSM8K's `#### N`)."""
    name, options = parse_hf_id(env_id)
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"task {env_id!r} needs the `datasets` package: pip install datasets") from None
    split = options.get("split", "test")
    try:
        data = datasets.load_dataset(name, options.get("config") or None, split=split)
    except Exception as exc:  # offline hub, unknown id or split: say which
        raise ConfigError(
            f"task {env_id!r}: the dataset cannot be loaded ({type(exc).__name__}: {exc}); check the id, "
            "split and network (or give a local folder or a JSONL file)"
        ) from None
    columns = list(data.column_names)
    prompt = options.get("prompt") or next((c for c in PROMPT_COLUMNS if c in columns), None)
    answer = options.get("answer") or next((c for c in ANSWER_COLUMNS if c in columns), None)
    if prompt not in columns or answer not in columns:
        raise ConfigError(
            f"task {env_id!r}: no prompt or answer column among {', '.join(columns)}; name them: "
            f"{HF_PREFIX}{name}?prompt=COLUMN&answer=COLUMN"
        )
    items = [_item(dict(row), prompt, answer, f"{name}[{split}][{i}]") for i, row in enumerate(data)]
    return ItemsTask(items, env_id)
