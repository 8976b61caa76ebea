"""The env settings as they are written: `ENV_ID[:NUM_PLAYERS[:NUM_ACTORS]]` (--env),
`ENV_ID[:NUM_PLAYERS[:OPPONENT]]` (--eval-env), or a TOML table of the spec's fields. Read here without the
env catalogue; what the catalogue fills in (a game's player count, a task's template) is
`unstable_core.envs.specs`'."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from unstable_core.errors import ConfigError
from unstable_core.types import EvalEnvSpec, TrainEnvSpec

HF_PREFIX = "hf:"  # a Hugging Face dataset: `hf:NAME[?config=..]`, whose colon separates nothing


def env_parts(value: str, maxsplit: int = -1) -> list[str]:
    """`ENV_ID[:A[:B]]` split at its colons; a dataset id's own `hf:` stays in the id."""
    prefix = HF_PREFIX if value.startswith(HF_PREFIX) else ""
    parts = value[len(prefix) :].split(":", maxsplit)
    return [prefix + parts[0], *parts[1:]]


def train_env_parts(value: str) -> tuple[str, int | None, int | None]:
    """`ENV_ID[:NUM_PLAYERS[:NUM_ACTORS]]` -> (id, players, actors), None where not given."""
    parts = env_parts(value)
    try:
        players = int(parts[1]) if len(parts) > 1 else None
        actors = int(parts[2]) if len(parts) > 2 else None
    except ValueError:
        raise ConfigError(
            f"--env {value!r}: expected ENV_ID[:NUM_PLAYERS[:NUM_ACTORS]] with integers"
        ) from None
    return parts[0], players, actors


def eval_env_parts(value: str) -> tuple[str, int | None, str | None]:
    """`ENV_ID[:NUM_PLAYERS[:OPPONENT]]` -> (id, players, opponent), None where not given."""
    parts = env_parts(value, 2)
    try:
        players = int(parts[1]) if len(parts) > 1 else None
    except ValueError:
        raise ConfigError(f"--eval-env {value!r}: expected ENV_ID[:NUM_PLAYERS[:OPPONENT]]") from None
    return parts[0], players, parts[2] if len(parts) > 2 else None


def env_table(value: Mapping[str, Any], spec: type, template: str, what: str) -> Any:
    """A TOML table of `spec`'s fields (TrainEnvSpec, EvalEnvSpec) as that spec, `template` its default."""
    try:
        return spec(**{"prompt_template": template, **value})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} entry {dict(value)}: {exc}") from exc


def check_env_settings(train_envs: Iterable[Any], eval_envs: Iterable[Any]) -> None:
    """Every env value reads (the catalogue checks the ids themselves before a run starts)."""
    for value in train_envs:
        if isinstance(value, Mapping):
            env_table(value, TrainEnvSpec, "default", "train_envs")
        elif not isinstance(value, TrainEnvSpec):
            train_env_parts(str(value))
    for value in eval_envs:
        if isinstance(value, Mapping):
            env_table(value, EvalEnvSpec, "default", "eval env")
        elif not isinstance(value, EvalEnvSpec):
            eval_env_parts(str(value))


def eval_opponent(value: Any) -> str | None:
    """The fixed opponent an eval env value names, or None."""
    if isinstance(value, EvalEnvSpec):
        return value.fixed_opponent
    if isinstance(value, Mapping):
        return value.get("fixed_opponent")
    return eval_env_parts(str(value))[2]
