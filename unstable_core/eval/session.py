"""Playing the games of `unstable eval` as a run that does not learn: a `RunPlan` with a fixed schedule,
started by the same `build_graph` as every run (one engine per base model, checkpoints as LoRA adapters on
it, a collector keeping many games in flight, the league and the recorder, which writes every game to
`<out>/games/games.jsonl`). No buffer and no learner exist here.

A task's item k is answered once by every model (a one-player game: no opponent, no seat to alternate).
Game k of a (model, opponent, env) triple seats the model at seat k mod 2 and has a seed that depends on
the evaluation's seed, the env and k only: every model meets the same deals and openings. No seat collects
training data (an evaluation never trains), so an API model can be the evaluated model as well as an
opponent; the report finds the model's turns by its seat.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import API_FIELDS, DEFAULT_ENV, RunConfig
from unstable_core.envs.tasks import SOLO
from unstable_core.errors import ConfigError
from unstable_core.eval.targets import EvalTarget, main_model
from unstable_core.runtime.launch.plan import FixedSchedule, LeagueEntry, RunPlan
from unstable_core.types import GameResult, GameSpec, PlannedGame, PlayerSpec, Triple, game_result_from_dict

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
    from unstable_core.envs.catalogue import get_task, template_for

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


def engines_of(targets: list[EvalTarget]) -> dict[str, str]:
    """Engine name -> model: `main` for the checkpoints' base model (and that model named itself), one
    engine per other whole model or API model; a scripted player needs none."""
    main = main_model(targets)
    engines: dict[str, str] = {}
    for t in targets:
        if t.kind == "adapter" or (t.kind == "model" and t.model == main):
            engines[MAIN] = main
        elif t.kind in ("model", "api"):
            engines[t.label] = t.model
    return engines


#: the RunConfig settings `unstable eval` takes (as options, each written once in RunConfig)
EVAL_SETTINGS = (
    "seed", "temperature", "top_p", "max_generation_len", "max_turns", "error_allowance", "device", "backend",
    "max_model_len", "max_batch_size", "game_timeout_s",
)  # fmt: skip


@attrs.frozen
class Evaluation:
    """What `unstable eval` was asked for, resolved: its players, games and settings."""

    models: list[EvalTarget]
    opponents: list[EvalTarget]
    envs: list[str]
    tasks: list[str]
    games: int
    template: str
    cfg: RunConfig
    planned: list[PlannedGame]
    probes: list[tuple[str, str]] = attrs.field(factory=list)  # (probe, env id) to run on each model

    @property
    def targets(self) -> list[EvalTarget]:
        """Every player, once (the opponents only where there are games)."""
        return list(dict.fromkeys(self.models + (self.opponents if self.envs else [])))

    def summary(self) -> dict[str, Any]:
        """The evaluation's part of summary.json."""
        settings = {name: getattr(self.cfg, name) for name in (*EVAL_SETTINGS, *API_FIELDS)}
        return {
            "models": [attrs.asdict(t) for t in self.models],
            "opponents": [attrs.asdict(t) for t in self.opponents] if self.envs else [],
            "envs": self.envs,
            "tasks": self.tasks,
            "games_per_pair": self.games,
            "settings": {**settings, "template": self.template},
            "probes": [{"probe": name, "env_id": env} for name, env in self.probes],
        }


def check_envs(envs: list[str], tasks: list[str] = ()) -> None:
    """Every --env is a two-player game, every --task a task (a file is read here: a bad line stops now)."""
    from unstable_core.envs.catalogue import check_env_id, check_task_id, is_task

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
    """The command's arguments checked and resolved (no model loaded): players, envs, tasks, the games of
    each, the probes (`NAME` or `NAME:ENV`, see `plan_probes`) and the RunConfig they play with (`options`
    given; a checkpoint's run's template and answer length unless given). With only tasks or probes asked
    for (no --env, and for probes no --opponent), no game is played."""
    from unstable_core.envs.catalogue import canonical_id
    from unstable_core.eval.targets import resolve_players, run_setting
    from unstable_core.games.analysis.catalogue import check_players
    from unstable_core.games.templates import get_template

    tasks = [canonical_id(t) for t in tasks]
    if tasks and opponents and not envs:
        raise ConfigError("--opponent plays games (--env); a --task has no opponent: leave --opponent out")
    asked = plan_probes(probes, list(envs))
    envs = list(envs) or ([] if tasks or (asked and not opponents) else [DEFAULT_ENV])
    check_envs(envs, tasks)
    if template is not None:
        get_template(template)
    mine, theirs = resolve_players(
        list(models), list(opponents) or (["base"] if envs else []), all_checkpoints
    )
    template = template or run_setting(mine, "prompt_template", _RUN.prompt_template.default, "--template")
    get_template(template)
    options = {k: v for k, v in options.items() if v is not None}
    options.setdefault(
        "max_generation_len",
        run_setting(mine, "max_generation_len", _RUN.max_generation_len.default, "--max-generation-len"),
    )
    check_players((t.label, env) for t in mine + theirs if t.kind == "player" for env in envs)
    check_players((t.label, env) for t in mine if t.kind == "player" for _, env in asked)
    for t in mine:
        if tasks and t.kind == "player":
            raise ConfigError(f"`{t.label}` (a scripted player) plays games only; it cannot answer a --task")
    players = list(dict.fromkeys(mine + (theirs if envs else [])))
    cfg = eval_config(players, **options)
    planned = plan_games(mine, theirs, envs, games, cfg.seed, template)
    planned += plan_task_items(mine, tasks, games, cfg.seed, template, first=len(planned))
    for t in mine if asked else []:
        if t.kind == "api":
            raise ConfigError(
                f"--probe measures a model's probabilities of answers, which an API model does not give: "
                f"{t.label}; probe local models, checkpoints and scripted players"
            )
    return Evaluation(mine, theirs, envs, tasks, games, template, cfg, planned, asked)


def plan_probes(probes: Sequence[str], envs: list[str]) -> list[tuple[str, str]]:
    """(probe, env id) pairs of `--probe` values: `NAME:ENV` on that env, `NAME` on each --env it covers
    (its own default env when there is no --env); an unknown probe, an env it does not cover or a missing
    requirement (OpenSpiel) is one ConfigError line naming the probes."""
    from unstable_core.games.analysis.measuring import probe_envs, probe_of

    pairs: list[tuple[str, str]] = []
    for value in probes:
        name, _, env = value.partition(":")
        for env_id in [env] if env else probe_envs(name, envs):
            probe_of(name, env_id)
            if (name, env_id) not in pairs:
                pairs.append((name, env_id))
    return pairs


def eval_config(targets: list[EvalTarget], **options: Any) -> RunConfig:
    """The RunConfig an evaluation plays with: the run's defaults, then `options` (the command's); its main
    model is the evaluated models' base, its fixed opponents the API models (for their checks)."""
    from unstable_core.models import DEFAULT_MODEL

    return RunConfig(
        model_name=main_model(targets) or DEFAULT_MODEL,
        fixed_opponents=[t.label for t in targets if t.kind == "api"],
        trackers=[],
        **options,
    )


def evaluation_plan(targets: list[EvalTarget], planned: list[PlannedGame], cfg: RunConfig) -> RunPlan:
    """The plan of an evaluation: no learner, exactly the `planned` games, a league of `targets` (a checkpoint
    keeps its uid and step; the base model is served by the main engine; any other model is fixed)."""
    main = main_model(targets)
    league = []
    for t in targets:
        if t.kind == "adapter":
            league.append(LeagueEntry(t.label, t.adapter, t.step))
        else:
            league.append(LeagueEntry(t.label, fixed=not (t.kind == "model" and t.model == main)))
    schedule = FixedSchedule(tuple(g.spec for g in planned), tuple(league), engines_of(targets))
    return RunPlan.fixed(cfg, schedule)


def check_before_start(plan: RunPlan, api: bool = True) -> None:
    """What can be checked before Ray starts: the backend (for vLLM on the CPU, its model folder and
    memory) and, with `api`, that the API models answer (one line otherwise)."""
    from unstable_core.runtime.launch.placement import check_backend_available
    from unstable_core.runtime.launch.preflight import check_api_settings, check_vllm_config

    cfg = plan.cfg
    check_vllm_config(cfg)
    check_api_settings(cfg.base_url)
    if cfg.backend != _RUN.backend.default:
        check_backend_available(cfg.backend, cfg.device, None)
        plan.vllm_kv_cache()
    if api and cfg.api_models():
        from unstable_core.runtime.launch.engines import check_api_models

        check_api_models(cfg)


def play_all(
    plan: RunPlan,
    out_dir: Path,
    concurrency: int,
    on_progress: Callable[[dict[str, int]], None] | None = None,
    on_event: Callable[[str], None] | None = None,
) -> list[GameResult]:
    """Play every game of the plan's schedule, `concurrency` at once, on the actors `build_graph` starts for
    any run; returns their results (failed ones included), as written to `<out_dir>/games/games.jsonl`.
    The first game of each distinct error is passed to `on_event` as it is recorded."""
    import ray

    from unstable_core.io import read_jsonl
    from unstable_core.runtime.launch.build import build_graph, close_adapter_caches, start_collection
    from unstable_core.runtime.launch.cluster import raise_interrupt, start_ray, stop_ray

    games = len(plan.schedule.games)
    owns_ray = not ray.is_initialized()
    previous = signal.getsignal(signal.SIGTERM)
    if owns_ray:
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        start_ray(None, include_dashboard=False, log_to_driver=False, namespace="unstable")
    try:
        signal.signal(signal.SIGTERM, raise_interrupt)  # after ray.init, which sets its own
        placement = plan.placement()
        graph = build_graph(plan, out_dir, placement, plan.cpu_threads(placement, os.cpu_count() or 1))
        (done,) = start_collection(graph.collectors, 0, concurrency, games)
        errors = _ErrorLines(graph.recorder, on_event)
        while not ray.wait([done], timeout=1.0)[0]:
            if on_progress:
                on_progress(ray.get(graph.collectors[0].stats.remote()))
            errors.poll()
        counts = ray.get(done)
        if on_progress:
            on_progress(counts)
        _wait_for_records(graph.recorder, games)
        errors.poll()
        ray.get([graph.recorder.close.remote(), graph.league.flush.remote()])
        close_adapter_caches(graph)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if owns_ray:
            stop_ray()
    return [game_result_from_dict(r) for r in read_jsonl(out_dir / "games" / "games.jsonl")]


class _ErrorLines:
    """The first game of each distinct error the recorder has seen, passed on once (see `play_all`)."""

    def __init__(self, recorder: Any, on_event: Callable[[str], None] | None) -> None:
        self.recorder, self.on_event, self.shown = recorder, on_event, set()

    def poll(self) -> None:
        import ray

        if self.on_event is None:
            return
        for entry in ray.get(self.recorder.snapshot.remote()).get("failures", {}).get("errors", []):
            if entry["error"] not in self.shown:
                self.shown.add(entry["error"])
                self.on_event(f"{entry['kind']} game {entry['game_idx']} failed: {entry['error']}")


def _wait_for_records(recorder: Any, expected: int, timeout_s: float = 60.0) -> None:
    """The collector sends games to the recorder without waiting: wait until it has every one."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ray.get(recorder.snapshot.remote())["counts"].get("eval_games", 0) >= expected:
            return
        time.sleep(0.2)
