"""A run's env settings as specs: each `--env`, `--eval-env` and `--eval-task` value read (its syntax is
`unstable_core.config.envs`') and completed from the env catalogue: a game's player count when none is
given, the `task` template for a task."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unstable_core.config.envs import env_table, eval_env_parts, train_env_parts
from unstable_core.envs.catalogue import canonical_id, default_players, template_for
from unstable_core.errors import ConfigError
from unstable_core.types import EvalEnvSpec, TrainEnvSpec


def train_spec(value: str | Mapping | TrainEnvSpec, default_template: str, mirror: bool) -> TrainEnvSpec:
    """`ENV_ID[:NUM_PLAYERS[:NUM_ACTORS]]` (or a TOML table) -> TrainEnvSpec; mirror self-play seats the
    learner at every seat unless NUM_ACTORS says otherwise."""
    if isinstance(value, TrainEnvSpec):
        return value
    if isinstance(value, Mapping):
        template = template_for(str(value.get("env_id", "")), default_template)
        return env_table(value, TrainEnvSpec, template, "train_envs")
    env_id, players, actors = train_env_parts(str(value))
    players = default_players(env_id) if players is None else players
    try:
        return TrainEnvSpec(
            env_id=canonical_id(env_id),
            num_players=players,
            num_actors=actors if actors is not None else (players if mirror else 1),
            prompt_template=template_for(env_id, default_template),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def eval_spec(value: str | Mapping | EvalEnvSpec, default_template: str) -> EvalEnvSpec:
    """`ENV_ID[:NUM_PLAYERS[:OPPONENT]]` (or a TOML table) -> EvalEnvSpec."""
    if isinstance(value, EvalEnvSpec):
        return value
    if isinstance(value, Mapping):
        template = template_for(str(value.get("env_id", "")), default_template)
        return env_table(value, EvalEnvSpec, template, "eval env")
    env_id, players, opponent = eval_env_parts(str(value))
    return EvalEnvSpec(
        env_id=canonical_id(env_id),
        num_players=default_players(env_id) if players is None else players,
        prompt_template=template_for(env_id, default_template),
        fixed_opponent=opponent,
    )


def train_specs(cfg: Any) -> list[TrainEnvSpec]:
    """The run's --env values as specs."""
    return [train_spec(e, cfg.prompt_template, cfg.mirror) for e in cfg.train_envs]


def eval_specs(cfg: Any) -> list[EvalEnvSpec]:
    """The run's --eval-env values as specs."""
    return [eval_spec(e, cfg.prompt_template) for e in cfg.eval_envs]


def task_specs(cfg: Any) -> list[EvalEnvSpec]:
    """The run's --eval-task tasks as one-player eval envs."""
    return [
        eval_spec({"num_players": 1, **t} if isinstance(t, Mapping) else f"{t}:1", cfg.prompt_template)
        for t in cfg.eval_tasks
    ]
