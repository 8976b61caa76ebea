"""The run's plan, read from its config alone: which engines (base models) serve the games, which fixed
opponents and evaluations there are, how many adapters an inference actor keeps, and where each actor
goes on the cluster. `Run` starts what the plan says; the preflight checks read it before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import RunConfig
from unstable_core.games.random_player import RANDOM
from unstable_core.inference.vllm import vllm_max_lora_rank, vllm_platform
from unstable_core.inference.vllm_memory import KvCachePlan, model_kv_cache
from unstable_core.models import is_api_model
from unstable_core.runtime.launch.components import Components
from unstable_core.runtime.launch.placement import (
    CpuThreads,
    Placement,
    check_nodes,
    check_vllm_placement,
    cluster_nodes,
    plan_placement,
    split_cpu_threads,
)
from unstable_core.types import EvalEnvSpec

DEFAULT_MAX_LORAS = (
    8  # adapters per inference actor when the opponent sampler cannot say how many are in play
)


def is_adapter_dir(name: str) -> bool:
    return (Path(name) / "adapter_config.json").is_file()


def eval_like(spec: Any, opponent: str) -> EvalEnvSpec:
    """An evaluation of a train env against `opponent`."""
    return EvalEnvSpec(
        env_id=spec.env_id,
        num_players=spec.num_players,
        prompt_template=spec.prompt_template,
        fixed_opponent=opponent,
    )


def _with_tasks(specs: list[EvalEnvSpec], cfg: RunConfig) -> list[EvalEnvSpec]:
    """`specs` and the --eval-task tasks, a task trained on and evaluated once (as its --eval-task)."""
    tasks = cfg.task_specs()
    return [s for s in specs if s.env_id not in {t.env_id for t in tasks}] + tasks


@attrs.define
class RunPlan:
    """A run's config with its resolved components, and what follows from them."""

    cfg: RunConfig
    components: Components
    learn: bool = True
    _kv_cache: KvCachePlan | None = attrs.field(default=None, init=False)

    @classmethod
    def resolve(cls, cfg: RunConfig, learn: bool = True) -> RunPlan:
        return cls(cfg, Components.resolve(cfg, Path(cfg.runs_dir), learner=learn), learn)

    def engines(self) -> dict[str, str]:
        """Engine name -> base model: the main model, plus any fixed opponent that is another model."""
        engines = {"main": self.cfg.model_name}
        for name in self.fixed_opponents():
            if name not in ("base", RANDOM) and not is_adapter_dir(name):
                engines[name] = name
        return engines

    def eval_specs(self, num_eval: int | None = None) -> list[Any]:
        """The eval envs; with none given but eval workers asked for, the train envs against a fixed opponent."""
        num_eval = self.cfg.num_eval_workers if num_eval is None else num_eval
        if self.cfg.eval_specs() or not num_eval:
            return self.cfg.eval_specs() + self.cfg.task_specs()
        opponent = self.cfg.fixed_opponents[0] if self.cfg.fixed_opponents else "base"
        return _with_tasks([eval_like(spec, opponent) for spec in self.cfg.train_specs()], self.cfg)

    def random_envs(self) -> list[str]:
        """The env ids where the `random` opponent may sit (each must list its legal moves)."""
        envs = [s.env_id for s in self.cfg.train_specs()] if RANDOM in self.cfg.fixed_opponents else []
        return envs + [e.env_id for e in self.eval_specs() if e.fixed_opponent == RANDOM]

    def fixed_opponents(self) -> list[str]:
        """Every fixed model of the run: --fixed-opponent values and the eval envs' opponents."""
        names = list(self.cfg.fixed_opponents)
        plan = self.eval_plan()
        for e in [*self.eval_specs(), *(plan.specs if plan else ())]:
            if e.fixed_opponent and e.fixed_opponent not in names:
                names.append(e.fixed_opponent)
        return names

    def eval_plan(self) -> Any:
        """The scheduled evaluation (--eval-every), or None: each eval env against its opponent (default
        base); with no eval env, each train env against each fixed opponent (default base)."""
        from unstable_core.runtime.actors.scheduled_eval import DEFAULT_OPPONENT, EvalPlan

        cfg = self.cfg
        if not cfg.eval_every:
            return None
        specs = [
            attrs.evolve(e, fixed_opponent=e.fixed_opponent or DEFAULT_OPPONENT) for e in cfg.eval_specs()
        ] or [
            eval_like(spec, opponent)
            for spec in cfg.train_specs()
            for opponent in cfg.fixed_opponents or [DEFAULT_OPPONENT]
        ]
        specs = _with_tasks(specs, cfg)
        return EvalPlan(tuple(specs), cfg.eval_every, cfg.eval_games, cfg.seed)

    def placement(self) -> Placement:
        """Where the actors go, fitted to the (started) Ray cluster's GPUs; raises PlacementError if they cannot."""
        import ray

        cluster = ray.cluster_resources()
        gpus = float(cluster.get("GPU", 0.0))
        use_gpu = self.cfg.device.startswith("cuda") if self.cfg.device else gpus >= 1
        if self.cfg.backend == "vllm":
            check_vllm_placement(vllm_platform(), use_gpu, self.cfg.device, gpus)
        others = sum(not is_api_model(m) for m in self.engines().values()) - 1  # API engines need no GPU
        plan = plan_placement(
            gpus,
            use_gpu=use_gpu,
            learn=self.learn,
            num_inference_actors=self.cfg.num_inference_actors,
            extra_engines=others,
            tensor_parallel=int(
                (self.cfg.vllm_config.get("engine_kwargs") or {}).get("tensor_parallel_size", 1)
            ),
        )
        check_nodes(plan, cluster_nodes(), others)
        return plan

    def cpu_threads(self, placement: Placement, cores: int) -> CpuThreads:
        """torch threads of the learner and of each local inference actor, from this machine's `cores`:
        shared between them when both compute on the CPU (API engines take none)."""
        engines = self.engines()
        local = sum(not is_api_model(m) for k, m in engines.items() if k != "main")
        local += placement.num_inference_actors * (not is_api_model(engines["main"]))
        return split_cpu_threads(
            cores,
            learner_on_cpu=self.learn and placement.learner_gpus == 0,
            cpu_engines=local if placement.inference_gpus == 0 else 0,
        )

    def max_loras(self) -> int:
        """Adapters each inference actor keeps loaded: those the opponent sampler's games use at once, the
        fixed opponents that are adapter folders, and one more for the version change; `--max-loras` wins."""
        if self.cfg.max_loras is not None:
            return self.cfg.max_loras
        in_play = self.components.model_sampler(seed=0, **self.cfg.sampler_config).adapters_in_play()
        if in_play is None:
            return DEFAULT_MAX_LORAS
        return in_play + 1 + sum(is_adapter_dir(name) for name in self.fixed_opponents())

    def backend_kwargs(self, placement: Placement) -> dict[str, Any]:
        """The inference backend's options from the run (for vLLM: LoRA rank, adapters, memory fraction)."""
        kwargs: dict[str, Any] = {
            "max_batch_size": self.cfg.max_batch_size,
            "max_loras": self.max_loras(),
            "max_model_len": self.cfg.max_model_len,
        }
        if self.cfg.backend != "vllm":
            return {**kwargs, "device": self.cfg.device}
        kwargs["max_lora_rank"] = vllm_max_lora_rank(self.cfg.lora_config["lora_rank"])
        if placement.gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = placement.gpu_memory_utilization
        elif self.vllm_kv_cache() is not None:
            kwargs["device"] = "cpu"
            kwargs["kv_cache_memory_bytes"] = self.vllm_kv_cache().kv_cache_bytes
        return {**kwargs, **self.cfg.vllm_config}  # what the user set in vllm_config wins

    def vllm_kv_cache(self) -> KvCachePlan | None:
        """The KV cache of each vLLM engine on the CPU, from free memory and the learner's share; None
        unless the run's vLLM is the CPU build and vllm_config sets neither kv_cache_memory_bytes nor
        gpu_memory_utilization (the user's choice wins)."""
        cfg = self.cfg
        chosen = {"kv_cache_memory_bytes", "gpu_memory_utilization"} & set(cfg.vllm_config)
        if cfg.backend != "vllm" or chosen or vllm_platform() != "cpu":
            return None
        if self._kv_cache is None:
            engines = cfg.num_inference_actors or 1
            engines += sum(not is_api_model(m) for k, m in self.engines().items() if k != "main")
            self._kv_cache = model_kv_cache(
                cfg.model_name,
                dtype=cfg.vllm_config.get("dtype") or "float32",
                max_batch_size=cfg.max_batch_size,
                max_model_len=cfg.max_model_len,
                engines=engines,
                learner_on_cpu=self.learn,
            )
        return self._kv_cache
