"""The run's plan, read from its config alone: which engines (base models) serve the games, which fixed
opponents and evaluations there are, how many adapters an inference actor keeps, and where each actor
goes on the cluster. `launch.graph` starts what the plan says, for `run`, `play`, `eval` and the
benchmarks alike; the preflight checks read it before anything starts. An evaluation is a plan that does
not learn and plays a `FixedSchedule`: exactly its games, between the models its league lists."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import RunConfig
from unstable_core.envs.specs import eval_specs, task_specs, train_specs
from unstable_core.games.players.catalogue import is_player
from unstable_core.inference.vllm.backend import vllm_max_lora_rank, vllm_platform
from unstable_core.inference.vllm.memory import KvCachePlan, model_kv_cache
from unstable_core.learners.settings import LearnerConfig
from unstable_core.model_loading import is_api_model
from unstable_core.plugins import get_registry
from unstable_core.probes.catalogue import plan_probes
from unstable_core.runtime.actors.scheduled_eval import DEFAULT_OPPONENT, ScheduledEval
from unstable_core.runtime.launch.components import Components
from unstable_core.runtime.launch.engines import EngineSpec, engine_spec
from unstable_core.runtime.launch.placement import (
    CpuThreads,
    Placement,
    check_nodes,
    check_vllm_placement,
    cluster_nodes,
    plan_placement,
    split_cpu_threads,
    usable_cores,
)
from unstable_core.runtime.launch.preflight import check_run
from unstable_core.types import EvalEnvSpec, GameSpec, TrainEnvSpec

DEFAULT_MAX_LORAS = (
    8  # adapters per inference actor when the opponent sampler cannot say how many are in play
)


def is_adapter_dir(name: str) -> bool:
    return (Path(name) / "adapter_config.json").is_file()


def adapter_rank(folder: str) -> int:
    """The LoRA rank of a peft adapter folder (its adapter_config.json's `r`)."""
    import json

    return int(json.loads((Path(folder) / "adapter_config.json").read_text())["r"])


def eval_like(spec: Any, opponent: str) -> EvalEnvSpec:
    """An evaluation of a train env against `opponent`."""
    return EvalEnvSpec(
        env_id=spec.env_id,
        num_players=spec.num_players,
        prompt_template=spec.prompt_template,
        fixed_opponent=opponent,
    )


def _with_tasks(specs: list[EvalEnvSpec], tasks: list[EvalEnvSpec]) -> list[EvalEnvSpec]:
    """`specs` and the --eval-task `tasks`, a task trained on and evaluated once (as its --eval-task)."""
    return [s for s in specs if s.env_id not in {t.env_id for t in tasks}] + tasks


@attrs.frozen
class LeagueEntry:
    """A model the league of a fixed schedule rates: a checkpoint (its adapter folder; None for the base
    model, served by the main engine) or a fixed opponent (`fixed`: served by its own engine)."""

    uid: str
    adapter: str | None = None
    step: int = 0
    fixed: bool = False


@attrs.frozen
class FixedSchedule:
    """Exactly these games, between the models of `league`, served by `engines` (name -> model): what an
    evaluation plays instead of sampling games from the run's samplers."""

    games: tuple[GameSpec, ...]
    league: tuple[LeagueEntry, ...]
    engines: Mapping[str, str]


@attrs.frozen
class Placed:
    """A plan fitted to the started Ray cluster: where its actors go, their torch threads and the inference
    backend's options (which depend on the GPUs found); `RunPlan.place` makes it once, the builder reads it."""

    placement: Placement
    threads: CpuThreads
    backend_kwargs: dict[str, Any]
    engines: dict[str, EngineSpec]  # engine name -> the backend and options that serve its model


@attrs.define
class RunPlan:
    """A run's config with its resolved components, and what follows from them, worked out once as the plan
    is made: the env specs, the scheduled evaluation, the fixed opponents and the engines that serve the
    games. `schedule`: the fixed games of a plan that does not learn (an evaluation); `backend_options`
    override the inference backend's constructor options (a benchmark's)."""

    cfg: RunConfig
    components: Components
    learn: bool = True
    schedule: FixedSchedule | None = None
    backend_options: Mapping[str, Any] = attrs.field(factory=dict)
    train_envs: list[TrainEnvSpec] = attrs.field(factory=list, init=False)
    eval_envs: list[EvalEnvSpec] = attrs.field(factory=list, init=False)
    tasks: list[EvalEnvSpec] = attrs.field(factory=list, init=False)
    scheduled_eval: ScheduledEval | None = attrs.field(default=None, init=False)
    fixed_opponents: list[str] = attrs.field(factory=list, init=False)
    engines: dict[str, str] = attrs.field(factory=dict, init=False)
    learner_config: LearnerConfig | None = attrs.field(default=None, init=False)
    _kv_cache: KvCachePlan | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        cfg = self.cfg
        self.train_envs, self.eval_envs, self.tasks = train_specs(cfg), eval_specs(cfg), task_specs(cfg)
        self.scheduled_eval = self._scheduled_eval()
        evals = [*self.eval_specs(), *(self.scheduled_eval.specs if self.scheduled_eval else ())]
        opponents = [*cfg.fixed_opponents, *(e.fixed_opponent for e in evals if e.fixed_opponent)]
        self.fixed_opponents = list(dict.fromkeys(opponents))
        self.engines = self._engines()
        if self.learn and self.components.learner is not None:
            self.learner_config = LearnerConfig.from_run(cfg, self.components.learner)

    @classmethod
    def resolve(cls, cfg: RunConfig, learn: bool = True, **options: Any) -> RunPlan:
        """The plan of `cfg`, its components resolved through the plugin registry (unknown names fail here)."""
        return cls(cfg, Components.resolve(cfg, Path(cfg.runs_dir), learner=learn), learn, **options)

    @classmethod
    def fixed(cls, cfg: RunConfig, schedule: FixedSchedule) -> RunPlan:
        """A plan that plays `schedule` and does not learn: no learner, samplers or reward transforms."""
        get_registry().get("backend", cfg.backend)
        return cls(cfg, Components.none(), learn=False, schedule=schedule)

    def check(self, resume: bool = False) -> None:
        """Every check of the plan before anything starts, in one call (`preflight.check_run`): what would
        fail inside an actor is one ConfigError line. A resumed run keeps its folder's name."""
        check_run(self, resume)

    def _engines(self) -> dict[str, str]:
        """Engine name -> base model: the main model, plus any fixed opponent that is another model."""
        if self.schedule is not None:
            return dict(self.schedule.engines)
        engines = {"main": self.cfg.model_name}
        for name in self.fixed_opponents:
            if name != "base" and not is_player(name) and not is_adapter_dir(name):
                engines[name] = name
        return engines

    def eval_specs(self, num_eval: int | None = None) -> list[EvalEnvSpec]:
        """The eval envs; with none given but eval workers asked for, the train envs against a fixed opponent."""
        num_eval = self.cfg.num_eval_workers if num_eval is None else num_eval
        if self.eval_envs or not num_eval:
            return self.eval_envs + self.tasks
        opponent = self.cfg.fixed_opponents[0] if self.cfg.fixed_opponents else "base"
        return _with_tasks([eval_like(spec, opponent) for spec in self.train_envs], self.tasks)

    def player_envs(self) -> list[tuple[str, str]]:
        """(scripted player, env id) for every env where a scripted opponent (`random`, `optimal`, ...) may
        sit: each must be able to play it."""
        players = [name for name in self.cfg.fixed_opponents if is_player(name)]
        pairs = [(name, s.env_id) for name in players for s in self.train_envs]
        return pairs + [
            (e.fixed_opponent, e.env_id) for e in self.eval_specs() if is_player(e.fixed_opponent)
        ]

    def _scheduled_eval(self) -> ScheduledEval | None:
        """The scheduled evaluation (--eval-every), or None: each eval env against its opponent (default
        base); with no eval env, each train env against each fixed opponent (default base)."""
        cfg = self.cfg
        if not cfg.eval_every:
            return None
        specs = [
            attrs.evolve(e, fixed_opponent=e.fixed_opponent or DEFAULT_OPPONENT) for e in self.eval_envs
        ] or [
            eval_like(spec, opponent)
            for spec in self.train_envs
            for opponent in cfg.fixed_opponents or [DEFAULT_OPPONENT]
        ]
        specs = _with_tasks(specs, self.tasks)
        probes = tuple(plan_probes(cfg.eval_probes, option="--eval-probe"))
        return ScheduledEval(tuple(specs), cfg.eval_every, cfg.eval_games, cfg.seed, probes)

    def place(self, cores: int | None = None) -> Placed:
        """The plan on the started Ray cluster: placement, threads from this machine's `cores` (default:
        all of them) and the backend's options."""
        placement = self.placement()
        kwargs = self.backend_kwargs(placement)
        threads = self.cpu_threads(placement, cores or os.cpu_count() or 1)
        engines = {key: engine_spec(model, self.cfg, kwargs) for key, model in self.engines.items()}
        return Placed(placement, threads, kwargs, engines)

    def placement(self) -> Placement:
        """Where the actors go, fitted to the (started) Ray cluster's GPUs; raises PlacementError if they cannot."""
        import ray

        cluster = ray.cluster_resources()
        gpus = float(cluster.get("GPU", 0.0))
        use_gpu = self.cfg.device.startswith("cuda") if self.cfg.device else gpus >= 1
        if self.cfg.backend == "vllm":
            check_vllm_placement(vllm_platform(), use_gpu, self.cfg.device, gpus)
        others = sum(not is_api_model(m) for k, m in self.engines.items() if k != "main")  # API: no GPU
        plan = plan_placement(
            gpus,
            use_gpu=use_gpu,
            learn=self.learn,
            num_inference_actors=self.cfg.num_inference_actors,
            extra_engines=others,
            tensor_parallel=int(
                (self.cfg.vllm_config.get("engine_kwargs") or {}).get("tensor_parallel_size", 1)
            ),
            learner_workers=self.cfg.learner_workers,
        )
        # a local cluster declares more CPUs than this machine has: count its cores
        check_nodes(plan, cluster_nodes(None if self.cfg.ray_address else usable_cores()), others)
        return plan

    def cpu_threads(self, placement: Placement, cores: int) -> CpuThreads:
        """torch threads of the learner and of each local inference actor, from this machine's `cores`:
        shared between them when both compute on the CPU (API engines take none)."""
        engines = self.engines
        local = sum(not is_api_model(m) for k, m in engines.items() if k != "main")
        if "main" in engines:
            local += placement.num_inference_actors * (not is_api_model(engines["main"]))
        return split_cpu_threads(
            cores,
            learner_on_cpu=self.learn and placement.learner_gpus == 0,
            cpu_engines=local if placement.inference_gpus == 0 else 0,
            learner_workers=placement.learner_workers,
        )

    def max_loras(self) -> int:
        """Adapters each inference actor keeps loaded: those the opponent sampler's games use at once, the
        fixed opponents that are adapter folders, and one more for the version change; `--max-loras` wins."""
        if self.cfg.max_loras is not None:
            return self.cfg.max_loras
        if self.schedule is not None:
            return max(1, sum(e.adapter is not None for e in self.schedule.league))
        in_play = self.components.model_sampler(seed=0, **self.cfg.sampler_config).adapters_in_play()
        if in_play is None:
            return DEFAULT_MAX_LORAS
        return in_play + 1 + sum(is_adapter_dir(name) for name in self.fixed_opponents)

    def backend_kwargs(self, placement: Placement) -> dict[str, Any]:
        """The inference backend's options from the run (for vLLM: LoRA rank, adapters, memory fraction)."""
        kwargs: dict[str, Any] = {
            "max_batch_size": self.cfg.max_batch_size,
            "max_loras": self.max_loras(),
            "max_model_len": self.cfg.max_model_len,
        }
        if self.cfg.backend != "vllm":
            return {**kwargs, "device": self.cfg.device, **self.backend_options}
        kwargs["max_lora_rank"] = vllm_max_lora_rank(max(self.lora_ranks(), default=1))
        if placement.gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = placement.gpu_memory_utilization
        elif self.vllm_kv_cache() is not None:
            kwargs["device"] = "cpu"
            kwargs["kv_cache_memory_bytes"] = self.vllm_kv_cache().kv_cache_bytes
        return {**kwargs, **self.cfg.vllm_config, **self.backend_options}  # what the user set wins

    def lora_ranks(self) -> list[int]:
        """The LoRA ranks the engines must load: the run's, or each adapter's of a fixed schedule."""
        if self.schedule is None:
            return [int(self.cfg.lora_config["lora_rank"])]
        return [adapter_rank(e.adapter) for e in self.schedule.league if e.adapter is not None]

    def vllm_kv_cache(self) -> KvCachePlan | None:
        """The KV cache of each vLLM engine on the CPU, from free memory and the learner's share; None
        unless the run's vLLM is the CPU build and vllm_config sets neither kv_cache_memory_bytes nor
        gpu_memory_utilization (the user's choice wins)."""
        cfg = self.cfg
        given = {*cfg.vllm_config, *self.backend_options}
        chosen = {"kv_cache_memory_bytes", "gpu_memory_utilization"} & given
        if cfg.backend != "vllm" or chosen or vllm_platform() != "cpu":
            return None
        if self._kv_cache is None:
            engines = sum(not is_api_model(m) for k, m in self.engines.items() if k != "main")
            engines += (cfg.num_inference_actors or 1) * ("main" in self.engines)
            self._kv_cache = model_kv_cache(
                cfg.model_name,
                dtype=cfg.vllm_config.get("dtype") or "float32",
                max_batch_size=cfg.max_batch_size,
                max_model_len=cfg.max_model_len,
                engines=engines,
                learner_on_cpu=self.learn,
            )
        return self._kv_cache
