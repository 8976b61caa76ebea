"""What `unstable eval` plays, planned once: its players resolved (`EvalTargets`), its games, tasks and
probes, the RunConfig they play with, and the `RunPlan` of a run that does not learn and plays exactly
those games (`eval.play` starts it with the launch path's `build_eval_graph`: one engine per base model,
checkpoints as LoRA adapters on it, a collector keeping many games in flight, the league and the
recorder). No buffer and no learner exist here.

A task's item k is answered once by every model (a one-player game: no opponent, no seat to alternate).
Game k of a (model, opponent, env) triple seats the model at seat k mod 2 and has a seed that depends on
the evaluation's seed, the env and k only: every model meets the same deals and openings. No seat collects
training data (an evaluation never trains), so an API model can be the evaluated model as well as an
opponent; the report finds the model's turns by its seat.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import attrs

from unstable_core.config import API_FIELDS, DEFAULT_ENV, RunConfig
from unstable_core.envs.catalogue import (
    canonical_id,
    check_env_id,
    check_task_id,
    get_task,
    is_task,
    template_for,
)
from unstable_core.envs.tasks import SOLO
from unstable_core.errors import ConfigError
from unstable_core.eval.targets import EvalTarget, EvalTargets, check_targets, eval_config
from unstable_core.games.templates import get_template
from unstable_core.probes.catalogue import PlannedProbe, plan_probes
from unstable_core.runtime.launch.plan import RunPlan
from unstable_core.runtime.launch.preflight import check_engines
from unstable_core.types import GameSpec, PlannedGame, PlayerSpec, Triple

MAIN = "main"
_RUN = attrs.fields(RunConfig)


def plan_games(
    models: list[EvalTarget],
    opponents: list[EvalTarget],
    envs: list[str],
    games: int,
    seed: int,
    template: str = _RUN.prompt_template.default,
) -> list[PlannedGame]:
    """N games per (model, opponent, env), seats alternated (game k: the model at seat k mod 2); no seat is a
    training seat."""
    planned = []
    for env in envs:
        seeds = [random.Random(f"{seed}:eval:{env}:{k}").randrange(2**31) for k in range(games)]
        for model in models:
            for opponent in opponents:
                for k in range(games):
                    me = k % 2
                    uids = {me: model.label, 1 - me: opponent.label}
                    players = [
                        PlayerSpec(pid, uids[pid], collect_data=False, prompt_template=template)
                        for pid in (0, 1)
                    ]
                    spec = GameSpec(len(planned), env, seeds[k], players, eval=True)
                    planned.append(PlannedGame(Triple(model.label, opponent.label, env), spec, me))
    return planned


def plan_task_items(
    models: list[EvalTarget], tasks: list[str], items: int, seed: int, template: str, first: int = 0
) -> list[PlannedGame]:
    """Per task, its items `seed * items` .. (a file's or dataset's items in order, at most all of them), one
    one-player game each per model; game indices from `first`."""
    planned = []
    for task in tasks:
        size = get_task(task).size
        count = min(items, size) if size else items
        for model in models:
            player = PlayerSpec(
                0, model.label, collect_data=False, prompt_template=template_for(task, template)
            )
            for k in range(count):
                spec = GameSpec(first + len(planned), task, seed * items + k, [player], eval=True)
                planned.append(PlannedGame(Triple(model.label, SOLO, task), spec, 0))
    return planned


#: the RunConfig settings `unstable eval` takes (as options, each written once in RunConfig)
EVAL_SETTINGS = (
    "seed", "temperature", "top_p", "max_generation_len", "max_turns", "error_allowance", "device", "backend",
    "max_model_len", "max_batch_size", "game_timeout_s",
)  # fmt: skip


@attrs.frozen
class Evaluation:
    """What `unstable eval` was asked for, resolved once: its players, games, probes and settings, and the
    plan of the run that plays the games (no learner, exactly `planned`)."""

    targets: EvalTargets
    envs: list[str]
    tasks: list[str]
    games: int
    template: str
    cfg: RunConfig
    planned: list[PlannedGame]
    probes: list[PlannedProbe] = attrs.field(factory=list)  # to run on each model
    run_plan: RunPlan = attrs.field(init=False)

    @run_plan.default
    def _run_plan(self) -> RunPlan:
        players = self.targets.players(with_opponents=bool(self.envs))
        return RunPlan.fixed(self.cfg, self.targets.schedule(players, self.planned))

    @property
    def models(self) -> list[EvalTarget]:
        return self.targets.models

    def summary(self) -> dict[str, Any]:
        """The evaluation's part of summary.json."""
        settings = {name: getattr(self.cfg, name) for name in (*EVAL_SETTINGS, *API_FIELDS)}
        return {
            "models": [attrs.asdict(t) for t in self.models],
            "opponents": [attrs.asdict(t) for t in self.targets.opponents] if self.envs else [],
            "envs": self.envs,
            "tasks": self.tasks,
            "games_per_pair": self.games,
            "settings": {**settings, "template": self.template},
            "probes": [p.to_dict() for p in self.probes],
        }


def check_envs(envs: list[str], tasks: list[str] = ()) -> None:
    """Every --env is a two-player game, every --task a task (a file is read here: a bad line stops now)."""
    for env in envs:
        if is_task(env):
            raise ConfigError(f"--env {env!r} is a task: give it as --task {env}")
        check_env_id(env, 2, "--env")
    for task in tasks:
        check_task_id(task, "--task")


def plan_evaluation(
    models: Sequence[str],
    opponents: Sequence[str],
    envs: Sequence[str],
    tasks: Sequence[str],
    games: int,
    all_checkpoints: bool,
    template: str | None,
    options: dict[str, Any],
    probes: Sequence[str] = (),
) -> Evaluation:
    """The command's arguments checked and resolved once (no model loaded): players, envs, tasks, the games
    of each, the probes (`NAME` or `NAME:ENV`, `probes.catalogue.plan_probes`), the RunConfig they play with (`options`
    given; a checkpoint's run's template and answer length unless given) and the run plan, whose engines
    are checked before anything starts. With only tasks or probes asked for (no --env, and for probes no
    --opponent), no game is played."""
    tasks = [canonical_id(t) for t in tasks]
    if tasks and opponents and not envs:
        raise ConfigError("--opponent plays games (--env); a --task has no opponent: leave --opponent out")
    asked = plan_probes(probes, list(envs), "--probe")
    envs = list(envs) or ([] if tasks or (asked and not opponents) else [DEFAULT_ENV])
    check_envs(envs, tasks)
    if template is not None:
        get_template(template)
    targets = EvalTargets.resolve(
        list(models), list(opponents) or (["base"] if envs else []), all_checkpoints
    )
    template = template or targets.setting("prompt_template", _RUN.prompt_template.default, "--template")
    options = {k: v for k, v in options.items() if v is not None}
    options.setdefault(
        "max_generation_len",
        targets.setting("max_generation_len", _RUN.max_generation_len.default, "--max-generation-len"),
    )
    cfg = eval_config(targets.players(with_opponents=bool(envs)), **options)
    check_targets(targets, envs, tasks, asked, template)
    planned = plan_games(targets.models, targets.opponents, envs, games, cfg.seed, template)
    planned += plan_task_items(targets.models, tasks, games, cfg.seed, template, first=len(planned))
    evaluation = Evaluation(targets, envs, tasks, games, template, cfg, planned, asked)
    if planned:
        check_engines(evaluation.run_plan)  # the backend, and the API models answer
    return evaluation
