"""Playing the games of `unstable eval` on the runtime a run uses: inference actors (one engine per base
model, checkpoints as LoRA adapters on it), a collector keeping many games in flight, the league and the
recorder (which writes every game to `<out>/games/games.jsonl`). No buffer and no learner exist here.

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
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import API_FIELDS, RunConfig
from unstable_core.envs.tasks import SOLO
from unstable_core.errors import UnstableError
from unstable_core.eval.targets import EvalTarget, main_model
from unstable_core.types import GameResult, GameSpec, PlayerSpec, game_result_from_dict

MAIN = "main"
_RUN = attrs.fields(RunConfig)


@attrs.frozen
class Triple:
    """What one group of games measures: `model` against `opponent` on `env`."""

    model: str
    opponent: str
    env: str


@attrs.frozen
class PlannedGame:
    """One game of the evaluation: its spec and where the evaluated model sits."""

    triple: Triple
    spec: GameSpec
    model_seat: int


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


class EvalScheduler:
    """Hands the collector the planned games in order (a GameScheduler's place; no training games)."""

    class _Static:
        def update(self, info: Any) -> None:
            """Nothing to learn from a game: the plan is fixed."""

    def __init__(self, specs: list[GameSpec]) -> None:
        self.specs = deque(specs)
        self.env_sampler = self.model_sampler = self._Static()
        self.shard, self.num_shards = 0, 1

    def next_eval(self, league: Any) -> GameSpec:
        return self.specs.popleft()

    def next_train(self, league: Any) -> GameSpec:
        raise UnstableError("an evaluation plays no training games")


@attrs.define
class EvalSettings:
    """How the games are played (the run's defaults where a run has the same setting)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_generation_len: int = attrs.field(default=_RUN.max_generation_len.default)
    max_turns: int = 60
    error_allowance: int = 0
    concurrency: int = 16
    seed: int = 0
    device: str | None = None
    backend: str = attrs.field(default=_RUN.backend.default)
    max_batch_size: int = 32
    max_model_len: int = 4096
    game_timeout_s: float = 600.0
    base_url: str | None = None
    api_key_env: str = attrs.field(default=_RUN.api_key_env.default)
    api_concurrency: int = attrs.field(default=_RUN.api_concurrency.default)
    api_timeout_s: float = attrs.field(default=_RUN.api_timeout_s.default)
    api_max_retries: int = attrs.field(default=_RUN.api_max_retries.default)
    api_max_tokens: int | None = None  # None: max_generation_len, as in a run


def engines_of(targets: list[EvalTarget]) -> dict[str, str]:
    """Engine name -> model: `main` for the checkpoints' base model (and that model named itself), one
    engine per other whole model or API model; `random` needs none."""
    main = main_model(targets)
    engines: dict[str, str] = {}
    for t in targets:
        if t.kind == "adapter" or (t.kind == "model" and t.model == main):
            engines[MAIN] = main
        elif t.kind in ("model", "api"):
            engines[t.label] = t.model
    return engines


def run_config(targets: list[EvalTarget], settings: EvalSettings) -> Any:
    """A RunConfig carrying the settings that engine_spec and the API check read."""
    from unstable_core.models import DEFAULT_MODEL

    return RunConfig(
        model_name=main_model(targets) or DEFAULT_MODEL,
        fixed_opponents=[t.label for t in targets if t.kind == "api"],
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_generation_len=settings.max_generation_len,
        max_model_len=settings.max_model_len,
        max_batch_size=settings.max_batch_size,
        device=settings.device,
        backend=settings.backend,
        **{name: getattr(settings, name) for name in API_FIELDS},
    )


def vllm_cpu_kwargs(cfg: RunConfig, engine_models: dict[str, str]) -> dict[str, Any]:
    """The vllm backend's CPU options (device, KV cache fitted to free memory; no learner beside it), or
    none for another backend or vLLM's CUDA build."""
    from unstable_core.inference.vllm import vllm_platform

    if cfg.backend != "vllm" or vllm_platform() != "cpu":
        return {}
    from unstable_core.inference.vllm_memory import model_kv_cache
    from unstable_core.models import is_api_model

    kv = model_kv_cache(
        cfg.model_name,
        max_batch_size=cfg.max_batch_size,
        max_model_len=cfg.max_model_len,
        engines=sum(not is_api_model(m) for m in engine_models.values()),
        learner_on_cpu=False,
    )
    return {"device": "cpu", "kv_cache_memory_bytes": kv.kv_cache_bytes}


def check_before_start(targets: list[EvalTarget], settings: EvalSettings, api: bool = True) -> Any:
    """What can be checked before Ray starts: the settings (as a RunConfig checks them) and, with `api`, that
    the API models answer (one line otherwise); returns that RunConfig."""
    cfg = run_config(targets, settings)
    if settings.backend != _RUN.backend.default:
        from unstable_core.runtime.launch.placement import check_backend_available

        check_backend_available(settings.backend, settings.device, None)
        vllm_cpu_kwargs(cfg, engines_of(targets))  # vLLM on the CPU: its model folder and memory, checked now
    if api and cfg.api_models():
        from unstable_core.inference.engines import check_api_models

        check_api_models(cfg)
    return cfg


def play_all(
    targets: list[EvalTarget],
    planned: list[PlannedGame],
    settings: EvalSettings,
    out_dir: Path,
    on_progress: Callable[[dict[str, int]], None] | None = None,
    on_event: Callable[[str], None] | None = None,
) -> list[GameResult]:
    """Play every planned game; returns their results (failed ones included), as written to
    `<out_dir>/games/games.jsonl`. The first game of each distinct error is passed to `on_event` as it is
    recorded (`eval game 3 failed: ...`, as `unstable run` shows them)."""
    import ray

    from unstable_core.inference.base import SamplingParams
    from unstable_core.inference.engines import engine_spec
    from unstable_core.models import default_device
    from unstable_core.runtime.actors.collector import Collector
    from unstable_core.runtime.actors.inference import create_engines
    from unstable_core.runtime.actors.league import LeagueActor
    from unstable_core.runtime.actors.recorder import RecorderActor
    from unstable_core.runtime.launch.cluster import raise_interrupt, start_ray, stop_ray
    from unstable_core.runtime.launch.graph import remote

    cfg = check_before_start(targets, settings, api=False)  # `unstable eval` checked the API models
    owns_ray = not ray.is_initialized()
    previous = signal.getsignal(signal.SIGTERM)
    if owns_ray:
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        start_ray(None, include_dashboard=False, log_to_driver=False, namespace="unstable")
    try:
        signal.signal(signal.SIGTERM, raise_interrupt)  # after ray.init, which sets its own
        recorder = remote(RecorderActor).remote(str(out_dir), [])
        league = remote(LeagueActor).remote(str(out_dir / "registry.json"))
        for t in targets:
            if t.kind == "adapter":
                ray.get(league.add_checkpoint.remote(t.label, t.adapter, t.step, inherit=False))
            elif t.kind == "model" and t.model == main_model(targets):  # served by the main engine
                ray.get(league.add_checkpoint.remote(t.label, None, 0, inherit=False))
            else:
                ray.get(league.add_fixed.remote(t.label))
        engine_models = engines_of(targets)
        device = settings.device or default_device()
        local = [k for k, m in engine_models.items() if not engine_spec(m, cfg, {}).remote]
        gpu = 1 / max(1, len(local)) if device.startswith("cuda") else 0
        threads = max(1, os.cpu_count() or 1)
        local_kwargs = {
            "max_batch_size": settings.max_batch_size,
            "max_loras": max(1, sum(t.kind == "adapter" for t in targets)),
            "max_model_len": settings.max_model_len,
            "device": settings.device,
        }
        local_kwargs.update(vllm_cpu_kwargs(cfg, engine_models))
        engines = create_engines(engine_models, cfg, local_kwargs, gpu=gpu, threads=threads)
        params = SamplingParams(
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_tokens=settings.max_generation_len,
            seed=settings.seed,
        )
        collector = remote(Collector, max_concurrency=4).remote(
            engines=engines,
            tokenizers=engine_models,
            buffer=None,
            league=league,
            recorder=recorder,
            scheduler=EvalScheduler([g.spec for g in planned]),
            params=params,
            max_turns=settings.max_turns,
            game_timeout_s=settings.game_timeout_s,
            error_allowance=settings.error_allowance,
        )
        done = collector.collect.remote(0, settings.concurrency, len(planned))
        errors = _ErrorLines(recorder, on_event)
        while not ray.wait([done], timeout=1.0)[0]:
            if on_progress:
                on_progress(ray.get(collector.stats.remote()))
            errors.poll()
        counts = ray.get(done)
        if on_progress:
            on_progress(counts)
        _wait_for_records(recorder, len(planned))
        errors.poll()
        ray.get([recorder.close.remote(), league.flush.remote()])
    finally:
        signal.signal(signal.SIGTERM, previous)
        if owns_ray:
            stop_ray()
    from unstable_core.io import read_jsonl

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
