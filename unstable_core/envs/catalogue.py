"""Env ids and what they name, in the order they are looked up:

1. a task file: an id ending in `.jsonl` (prompt/answer records, see `sources.jsonl_task`);
2. a Hugging Face dataset: `hf:NAME[?config=..&split=..&prompt=..&answer=..]`;
3. a game or task a plugin registered (`register_envs`, the core's `arithmetic-1` .. `arithmetic-5` too);
4. a TextArena id (`TicTacToe-v0-train`).

A registered id that TextArena also has is refused (one id, one game).
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path
from typing import Any

import attrs

from unstable_core.envs.sources import HF_PREFIX, hf_task, jsonl_task
from unstable_core.envs.tasks import Task, TaskEnv
from unstable_core.errors import ConfigError, UnstableError

TASK_FILE_SUFFIX = ".jsonl"
GAME_TEMPLATES, TASK_TEMPLATE = ("default", "move"), "task"  # the generic chat templates of games


@attrs.frozen
class EnvInfo:
    """One id `unstable envs` lists: a game or a task, its player counts and who provides it."""

    id: str
    kind: str  # "game" or "task"
    players: tuple[int, ...] | None  # None: TextArena's own (its env checks the count at reset)
    provider: str
    description: str = ""


def _registry() -> Any:
    from unstable_core.plugins import get_registry

    return get_registry()


def _textarena_ids() -> dict[str, Any]:
    from textarena.envs.registration import ENV_REGISTRY

    return ENV_REGISTRY


def _registered(env_id: str) -> Any:
    """The `register_envs` component of `env_id`, or None; a clash with TextArena is a ConfigError."""
    if env_id not in _registry().names("env"):
        return None
    component = _registry().get("env", env_id)
    if env_id in _textarena_ids():
        raise ConfigError(
            f"env id {env_id!r} is registered by {component.dist or component.plugin} and by TextArena; "
            "one id names one game: uninstall the plugin or have it use another id"
        )
    return component


def is_task(env_id: str) -> bool:
    """Whether `env_id` names a single-turn task (a file, a dataset or a registered task)."""
    if env_id.endswith(TASK_FILE_SUFFIX) or env_id.startswith(HF_PREFIX):
        return True
    component = _registered(env_id)
    return bool(component is not None and component.options.get("task"))


def canonical_id(env_id: str) -> str:
    """The id as every process of a run reads it: a task file's path made absolute."""
    if env_id.endswith(TASK_FILE_SUFFIX):
        return str(Path(env_id).expanduser().resolve())
    return env_id


def default_players(env_id: str) -> int:
    """The player count an id gets when none is given: 1 for a task, a registered game's smallest, else 2."""
    if is_task(env_id):
        return 1
    component = _registered(env_id)
    return min(component.options["players"]) if component is not None else 2


def template_for(env_id: str, template: str) -> str:
    """A task is prompted with the `task` template where a generic game template (`move`, the run's default,
    or `default`) would be used; a named one (`qwen3-reasoning`) is kept."""
    return TASK_TEMPLATE if template in GAME_TEMPLATES and is_task(env_id) else template


@functools.lru_cache(maxsize=32)
def get_task(env_id: str) -> Task:
    """The task of a task id (loaded once per process: a file or a dataset is read once)."""
    if env_id.endswith(TASK_FILE_SUFFIX):
        return jsonl_task(env_id)
    if env_id.startswith(HF_PREFIX):
        return hf_task(env_id)
    component = _registered(env_id)
    if component is None or not component.options.get("task"):
        raise ConfigError(f"{env_id!r} is not a task; `unstable envs --tasks` lists them")
    task = component.load()()
    if not isinstance(task, Task):
        raise UnstableError(
            f"task {env_id!r} of {component.dist}: its factory returned a {type(task).__name__}, not a "
            "unstable_core.envs.Task"
        )
    return task


def make_env(env_id: str) -> Any:
    """A fresh env for one game of `env_id` (see the module docstring for the lookup order)."""
    if is_task(env_id):
        return TaskEnv(get_task(env_id))
    component = _registered(env_id)
    if component is not None:
        return _wrapped(component.load()(), component.options.get("wrappers"))
    import textarena

    return textarena.make(env_id)


def _wrapped(env: Any, wrappers: list[Any] | None) -> Any:
    """A registered game's env as it is played: its `wrappers=` applied in order, as TextArena's `register`
    takes them; without any, a bare TextArena `Env` gets TextArena's LLM observation wrapper (text
    observations, as `textarena.make` gives its plain ids); `wrappers=[]` leaves it bare."""
    from unstable_core.registry import load_target

    if wrappers is None:
        import textarena

        if isinstance(env, textarena.Env) and not isinstance(env, textarena.Wrapper):
            from textarena.wrappers import LLMObservationWrapper

            return LLMObservationWrapper(env)
        return env
    for wrapper in wrappers:
        env = load_target(wrapper)(env)
    return env


def check_env_id(env_id: str, players: int | None = None, what: str = "--env") -> None:
    """A ConfigError (with close ids) unless `env_id` names a game or task, and one for `players` players;
    a task file or dataset is loaded here, so that a bad record stops the run before it starts."""
    if is_task(env_id):
        get_task(env_id)
        if players not in (None, 1):
            raise ConfigError(f"{what} {env_id}:{players}: a task has one player; leave the count out")
        return
    component = _registered(env_id)
    if component is not None:
        allowed = component.options["players"]
        if players is not None and players not in allowed:
            raise ConfigError(
                f"{what} {env_id}:{players}: {env_id} is played by {', '.join(map(str, allowed))} players"
            )
        return
    if env_id in _textarena_ids():
        return
    close = close_ids(env_id, [*_textarena_ids(), *_registry().names("env")])
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(
        f"{what} {env_id!r} is not a game or task id{hint} (`unstable envs` lists them; a task file ends "
        "in .jsonl)"
    )


def check_task_id(env_id: str, what: str = "--task") -> None:
    """A ConfigError unless `env_id` names a task (a file or dataset is loaded here): a game id is sent to
    --env, an unknown one gets the close task ids (`arithmetic`: arithmetic-1 .. arithmetic-5)."""
    if is_task(env_id):
        check_env_id(env_id, 1, what)
        return
    if _registered(env_id) is not None or env_id in _textarena_ids():
        raise ConfigError(f"{what} {env_id!r} is a game, not a task: give it as --env {env_id}")
    tasks = [c.name for c in _registry().by_kind("env") if c.options.get("task")]
    close = close_ids(env_id, tasks)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(
        f"{what} {env_id!r} is not a task id{hint} (`unstable envs --tasks` lists them; a task file ends "
        "in .jsonl)"
    )


def close_ids(env_id: str, known: list[str], n: int = 5) -> list[str]:
    """Up to `n` of `known` that `env_id` may mean: those it opens (sorted), then the most similar."""
    extending = sorted(k for k in known if k.lower().startswith(env_id.lower()) and k != env_id)
    similar = difflib.get_close_matches(env_id, known, n=n)
    return list(dict.fromkeys([*extending, *similar]))[:n]


def list_envs(include_raw: bool = False) -> list[EnvInfo]:
    """Every registered game and task, then TextArena's ids (its `-raw` variants only with `include_raw`)."""
    out = []
    for c in _registry().by_kind("env"):
        kind = "task" if c.options.get("task") else "game"
        out.append(EnvInfo(c.name, kind, tuple(c.options["players"]), c.dist or c.plugin, c.description))
    taken = {e.id for e in out}
    for env_id in sorted(_textarena_ids()):
        if env_id not in taken and (include_raw or not env_id.endswith("-raw")):
            out.append(EnvInfo(env_id, "game", None, "textarena"))
    return out
