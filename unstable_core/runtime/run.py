"""`build(...)`: resolve a run's components, start its Ray actors, wait for it, stop it cleanly.

Recorder, League, Buffer, InferenceActor x N (per engine), Collector x M and the Learner are Ray
actors; games are coroutines inside the collectors.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import DEFAULT_LORA_CFG, RunConfig, config_from_dict, merge_layers, parse_transform
from unstable_core.errors import ConfigError, RunFailed, RunStopped, debug_enabled, describe, root_cause
from unstable_core.games.random_player import RANDOM, check_random_supported
from unstable_core.inference.vllm import vllm_max_lora_rank
from unstable_core.io import atomic_write_json
from unstable_core.models import is_api_model
from unstable_core.plugins import get_registry
from unstable_core.rewards import check_stage
from unstable_core.run_lock import LOCK_NAME, RunLock
from unstable_core.runtime.cluster import end_watchdog, start_ray, stop_ray
from unstable_core.runtime.liveness import (
    FAILED_TO_START,
    ActorDied,
    InferenceWatch,
    check_answers,
    death_reason,
    oom_reason,
)
from unstable_core.runtime.placement import (
    Placement,
    PlacementError,
    check_backend_available,
    check_nodes,
    cluster_nodes,
    plan_placement,
)
from unstable_core.runtime.preflight import (
    check_components,
    check_device,
    check_env_ids,
    check_env_players,
    check_lora_targets,
    check_model,
    check_run_name,
    check_templates,
    check_trackers,
    claim_run_dir,
)
from unstable_core.runtime.resume import (
    RESUME_HINT,
    ResumePoint,
    checkpoint_steps,
    find_resume_point,
    prepare_logs,
    record_event,
    record_resume,
    resume_config,
)

DEFAULT_MAX_LORAS = (
    8  # adapters per inference actor when the opponent sampler cannot say how many are in play
)


def instantiate(kind: str, spec: Any, **extra: Any) -> Any:
    """Build a registered component from `name` or `name:key=value,...` (or a TOML table)."""
    name, params = parse_transform(spec)
    cls = get_registry().load(kind, name)
    try:
        return cls(**{**extra, **params})
    except TypeError as exc:
        raise ConfigError(f"{kind.replace('_', ' ')} {name!r}: {exc}") from exc


def is_adapter_dir(name: str) -> bool:
    return (Path(name) / "adapter_config.json").is_file()


@attrs.define
class Components:
    """What a run config names, resolved through the plugin league (errors surface before Ray starts)."""

    learner: Any
    env_sampler: Any
    model_sampler: Any
    final: list[Any]
    step: list[Any]
    sampling: list[Any]
    trackers: list[Any]

    @classmethod
    def resolve(cls, cfg: RunConfig, run_dir: Path, learner: bool = True) -> Components:
        reg = get_registry()
        reg.get("backend", cfg.backend)
        transforms = {}
        for stage in ("final", "step", "sampling"):
            transforms[stage] = [
                instantiate("reward_transform", t) for t in getattr(cfg, f"{stage}_transforms")
            ]
            try:
                check_stage(transforms[stage], stage)
            except TypeError as exc:
                raise ConfigError(f"{stage}_transforms: {exc}") from exc
        trackers = []
        for name in cfg.trackers:
            tracker_cls = reg.load("tracker", name)
            check_trackers([(name, tracker_cls)])
            extra = {"project": cfg.wandb_project} if name == "wandb" else {}
            trackers.append(
                (
                    tracker_cls,
                    {"run_dir": str(run_dir), "run_name": run_dir.name, "config": cfg.to_dict(), **extra},
                )
            )
        return cls(
            learner=reg.load("learner", cfg.learner) if learner else None,
            env_sampler=reg.load("env_sampler", cfg.env_sampler),
            model_sampler=reg.load("model_sampler", cfg.sampler),
            trackers=trackers,
            **transforms,
        )


class Run:
    """A training run: `start()`, then `wait()` (or `stop()`); as in the reference's minimal script."""

    def __init__(
        self,
        cfg: RunConfig,
        learn: bool = True,
        resume: str | os.PathLike | None = None,
        resume_changes: dict[str, Any] | None = None,
    ) -> None:
        """`resume`: the folder of the run to continue (its config is `cfg`, see `resume_config`)."""
        self.cfg = cfg
        self.learn = learn
        self.resume_dir = Path(resume).resolve() if resume is not None else None
        self.resume_changes = resume_changes or {}
        self.resume_point: ResumePoint | None = None
        if cfg.run_name is not None and self.resume_dir is None:
            check_run_name(cfg.run_name)
        self.components = Components.resolve(cfg, Path(cfg.runs_dir), learner=learn)
        self.preflight()
        check_backend_available(cfg.backend, cfg.device, cfg.ray_address)
        if cfg.api_models():
            from unstable_core.inference.engines import check_api_models

            check_api_models(cfg)  # a bad key, URL or model name stops the run before Ray starts
        check_random_supported(self.random_envs())
        # last, once every check passed: a refused run leaves no folder; an existing one is never touched
        # (but the one --resume continues)
        self.run_dir = self.resume_dir or claim_run_dir(cfg.runs_dir, cfg.run_name)
        # before anything is written: one process per run directory (a second --resume, or a resume of a
        # run that is still going, is refused naming the process)
        self.lock = RunLock.acquire(self.run_dir)
        for _cls, kwargs in self.components.trackers:
            kwargs.update(run_dir=str(self.run_dir), run_name=self.run_dir.name)
        self.actors: dict[str, Any] = {}
        self._collect_refs: list[Any] = []
        self._train_ref: Any = None
        self._owns_ray = False
        self.started_at = 0.0
        self.summary: dict[str, Any] = {}
        self.index_base = 0  # the first game index of this process (a resumed run numbers after the recorded)
        self._watch: InferenceWatch | None = None

    def preflight(self) -> None:
        """What can fail inside an actor, checked here before Ray starts: env ids and player counts,
        templates, models, the device, the components' options."""
        cfg, comp = self.cfg, self.components
        train, evals = cfg.train_specs(), self.eval_specs()
        check_env_ids([s.env_id for s in train], "--env")
        check_env_ids([s.env_id for s in evals], "--eval-env")
        check_env_players(train, "--env")
        check_env_players(evals, "--eval-env")
        check_templates(sorted({s.prompt_template for s in [*train, *evals]}))
        for key, model in self._engines().items():
            if not is_api_model(model):  # an API model is checked by check_api_models
                check_model(model, "--model" if key == "main" else "fixed opponent")
        check_device(cfg.device, cfg.ray_address)
        check_components(cfg, comp.env_sampler, comp.model_sampler, comp.learner, evals)
        if self.learn:
            check_lora_targets(cfg.model_name, cfg.lora_config, DEFAULT_LORA_CFG["target_modules"])

    # ---- start
    def _init_ray(self) -> None:
        import ray

        if ray.is_initialized():
            return
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        # a local cluster's watchdog holds the lock too: after a kill of this process it is let go only
        # once the cluster's processes are gone
        self.lock.on_release(end_watchdog)
        start_ray(
            self.cfg.ray_address,
            hold_fds=[self.lock.fileno()],
            include_dashboard=False,
            log_to_driver=False,
            namespace="unstable",
        )
        self._owns_ray = True

    def _engines(self) -> dict[str, str]:
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
            return self.cfg.eval_specs()
        opponent = self.cfg.fixed_opponents[0] if self.cfg.fixed_opponents else "base"
        return [_eval_like(spec, opponent) for spec in self.cfg.train_specs()]

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
        from unstable_core.runtime.scheduled_eval import DEFAULT_OPPONENT, EvalPlan

        cfg = self.cfg
        if not cfg.eval_every:
            return None
        specs = [
            attrs.evolve(e, fixed_opponent=e.fixed_opponent or DEFAULT_OPPONENT) for e in cfg.eval_specs()
        ] or [
            _eval_like(spec, opponent)
            for spec in cfg.train_specs()
            for opponent in cfg.fixed_opponents or [DEFAULT_OPPONENT]
        ]
        return EvalPlan(tuple(specs), cfg.eval_every, cfg.eval_games, cfg.seed)

    def placement(self) -> Placement:
        """Where the actors go, fitted to the (started) Ray cluster's GPUs; raises PlacementError if they cannot."""
        import ray

        cluster = ray.cluster_resources()
        gpus = float(cluster.get("GPU", 0.0))
        use_gpu = self.cfg.device.startswith("cuda") if self.cfg.device else gpus >= 1
        if self.cfg.backend == "vllm" and not use_gpu:
            raise PlacementError(
                "backend vllm needs a GPU, but the run is placed on the CPU "
                f"(device {self.cfg.device or 'auto'}, the Ray cluster has {gpus:g} GPUs): use --backend transformers"
            )
        others = sum(not is_api_model(m) for m in self._engines().values()) - 1  # API engines need no GPU
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
        return {**kwargs, **self.cfg.vllm_config}  # what the user set in vllm_config wins

    def _drop_empty_run_dir(self) -> None:
        """A run that failed before writing anything leaves no folder behind (nor a Ray cluster)."""
        if self._owns_ray:
            stop_ray()
        self.lock.release()
        if [p.name for p in self.run_dir.iterdir()] == [LOCK_NAME]:
            with contextlib.suppress(OSError):
                (self.run_dir / LOCK_NAME).unlink()
                self.run_dir.rmdir()  # only an empty directory

    def start(
        self,
        learning_steps: int | None = None,
        num_collection_workers: int | None = None,
        num_eval_workers: int | None = None,
        max_games: int | None = None,
    ) -> Run:
        """Start every actor, the collection and (unless this run only plays) the learner."""
        import ray

        from unstable_core.inference.base import SamplingParams
        from unstable_core.runtime.buffer import BUFFERS
        from unstable_core.runtime.collector import Collector
        from unstable_core.runtime.inference_actor import create_engines
        from unstable_core.runtime.league_actor import LeagueActor
        from unstable_core.runtime.learner_actor import LearnerActor
        from unstable_core.runtime.scheduler import GameScheduler

        cfg, comp = self.cfg, self.components
        learning_steps = learning_steps or cfg.learning_steps
        num_train = num_collection_workers or cfg.num_train_workers
        num_eval = cfg.num_eval_workers if num_eval_workers is None else num_eval_workers
        try:
            self._init_ray()
            placement = self.placement()
        except BaseException:
            self._drop_empty_run_dir()
            raise
        if self.resume_dir is not None:
            self.resume_point = find_resume_point(self.run_dir)
            resume_record = prepare_logs(self.resume_point, self.run_dir, self.resume_changes)
            self.index_base = resume_record["next_game_index"]
        else:
            cfg.save(self.run_dir / "config.toml")
        point = self.resume_point
        self.started_at = time.time()
        threads = max(1, os.cpu_count() or 1)

        remote = lambda cls, **opts: ray.remote(cls).options(num_cpus=0, **opts)  # noqa: E731
        self.actors["recorder"] = remote(RecorderActor).remote(
            str(self.run_dir),
            comp.trackers,
            cfg.failure_window,
            cfg.max_failure_rate,
            point.step if point else 0,
        )
        league = remote(LeagueActor).remote(
            str(self.run_dir / "registry.json"),
            state=point.league if point else None,
            fresh=self.resume_dir is not None,
        )
        self.actors["league"] = league
        if point is None:
            ray.get(league.add_checkpoint.remote("ckpt-0", None, 0, inherit=False))
        else:  # the league as it was when the checkpoint was saved, then the checkpoint itself
            ray.get(league.add_checkpoint.remote(f"ckpt-{point.step}", str(point.checkpoint), point.step))
        for name in self.fixed_opponents():
            ray.get(league.add_fixed.remote(name))

        buffer_kind = getattr(comp.learner, "buffer_kind", "step") if self.learn else "step"
        buffer = None
        if self.learn:
            buffer = remote(BUFFERS[buffer_kind]).remote(
                cfg.effective_buffer_size,
                comp.final,
                comp.step,
                comp.sampling,
                max_staleness=cfg.max_staleness,
            )
            self.actors["buffer"] = buffer
            if point is not None:
                ray.get(
                    [
                        buffer.load_state_dict.remote(point.rewards),
                        buffer.set_policy_version.remote(point.step),
                    ]
                )
        if self.resume_dir is not None:  # with the ratings and reward state read back from the live actors
            models = ray.get(league.to_dict.remote())["models"]
            resume_record["ratings_loaded"] = {
                m["uid"]: {k: m[k] for k in ("mu", "sigma", "games")} for m in models
            }
            if buffer is not None:
                resume_record["rewards_loaded"] = ray.get(buffer.state_dict.remote())
            record_resume(self.run_dir, resume_record)

        engines = create_engines(
            self._engines(),
            cfg,
            self.backend_kwargs(placement),
            gpu=placement.inference_gpus,
            threads=threads,
            main_actors=placement.num_inference_actors,
        )
        self.actors["engines"] = engines
        params = SamplingParams(
            temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_generation_len
        )
        eval_specs = self.eval_specs(num_eval)
        collectors = []
        for shard in range(cfg.num_collectors):
            scheduler = GameScheduler(
                comp.env_sampler(
                    cfg.train_specs(), eval_specs, seed=cfg.seed + shard, **cfg.env_sampler_config
                ),
                comp.model_sampler(seed=cfg.seed + shard, **cfg.sampler_config),
                seed=cfg.seed,
                shard=shard,
                num_shards=cfg.num_collectors,
                index_base=self.index_base,
            )
            saved = point.collector_state(shard) if point is not None else None
            if saved:
                scheduler.load_state_dict(saved)
            collectors.append(
                # collect() runs for the whole run: stop() and stats() need room beside it
                remote(Collector, max_concurrency=4).remote(
                    engines=engines,
                    tokenizers=self._engines(),
                    buffer=buffer,
                    league=league,
                    recorder=self.actors["recorder"],
                    scheduler=scheduler,
                    params=params,
                    max_turns=cfg.max_turns,
                    game_timeout_s=cfg.game_timeout_s,
                    error_allowance=cfg.error_allowance,
                    eval_plan=self.eval_plan() if self.learn else None,
                )
            )
        self.actors["collectors"] = collectors
        share = lambda n, i: n // len(collectors) + (1 if i < n % len(collectors) else 0)  # noqa: E731
        games_share = (lambda i: None) if max_games is None else (lambda i: share(max_games, i))  # noqa: E731
        self._collect_refs = [
            c.collect.remote(share(num_train, i), share(num_eval, i), games_share(i))
            for i, c in enumerate(collectors)
        ]
        if self.learn:
            learner_kwargs = dict(
                model_name=cfg.model_name,
                lora_cfg=cfg.lora_config,
                batch_size=cfg.batch_size,
                mini_batch_size=cfg.mini_batch_size,
                learning_rate=cfg.learning_rate,
                grad_clip=cfg.gradient_clipping,
                activation_checkpointing=cfg.activation_checkpointing,
                gradient_checkpointing=cfg.gradient_checkpointing,
                max_train_len=cfg.max_train_len,
                max_generation_len=cfg.max_generation_len,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                importance_cap=cfg.importance_cap,
                run_dir=str(self.run_dir),
                device=cfg.device,
                seed=cfg.seed,
            )
            host = remote(LearnerActor, num_gpus=placement.learner_gpus, max_concurrency=2).remote(
                comp.learner,
                learner_kwargs,
                cfg.algorithm_config,
                buffer=buffer,
                league=league,
                recorder=self.actors["recorder"],
                batch_size=cfg.batch_size,
                torch_threads=threads,
                collectors=collectors,
                resume_from=str(point.checkpoint) if point is not None else None,
                max_nonfinite_updates=cfg.max_nonfinite_updates,
            )
            self.actors["learner"] = host
            self._train_ref = host.train.remote(learning_steps)
        return self

    # ---- watch
    def progress(self) -> dict[str, Any]:
        """Recorder snapshot plus the league's ratings (for a progress display)."""
        import ray

        snap = ray.get(self.actors["recorder"].snapshot.remote())
        snap["registry"] = ray.get(self.actors["league"].to_dict.remote())
        try:
            engine = self.actors["engines"]["main"][0]
            stats = ray.get(engine.stats.remote(), timeout=5)
            self.actors["recorder"].set_inference_stats.remote(stats)
            snap["inference"] = stats
        except Exception:  # a restarting inference actor must not stop the display
            pass
        return snap

    def wait(
        self,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        poll_s: float = 2.0,
        on_event: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """Block until the learner has done its steps (or a play run its games); then stop and summarise.

        Each distinct game error is passed to `on_event` once (default: printed). A run whose games keep
        failing, or whose learner or collection raised, is stopped and raises RunFailed with one line."""
        import ray

        on_event = on_event or print
        waiting = [self._train_ref] if self._train_ref is not None else list(self._collect_refs)
        # while learning, a collector that ends (it only ends by dying) would leave the learner waiting
        watched = list(self._collect_refs) if self._train_ref is not None else []
        shown: set[str] = set()
        who = "an actor"
        names = self._actor_names()
        self._watch = inference = InferenceWatch(
            {names[a._actor_id.hex()]: a for a in self._inference_actors()}
        )
        try:
            while waiting:
                done, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=poll_s)
                for ref in done:
                    who = "the learner" if ref == self._train_ref else "collection"
                    ray.get(ref)  # surface a crashed learner or collector
                ended, watched = ray.wait(watched, num_returns=len(watched), timeout=0)
                for ref in ended:
                    who = "collection"
                    ray.get(ref)
                    raise ActorDied("a collector", "it stopped collecting")
                self._check_alive()
                for name, line in inference.poll():
                    on_event(line)
                    record_event(self.run_dir, "actor_restarted", actor=name)
                snap = self.progress()
                for entry in snap.get("failures", {}).get("errors", []):
                    if entry["error"] not in shown:
                        shown.add(entry["error"])
                        on_event(f"{entry['kind']} game {entry['game_idx']} failed: {entry['error']}")
                if snap.get("stop_reason"):
                    raise RunFailed(f"run stopped: {snap['stop_reason']}")
                if on_progress:
                    on_progress(snap)
            if self._train_ref is not None and self.cfg.eval_every:
                self._drain_evals(on_progress, poll_s)
        except RunFailed:
            self.stop()
            raise
        except ray.exceptions.OutOfMemoryError as exc:  # not a RayTaskError: `who` was being waited on
            raise self._stop_after_death(ActorDied(who, oom_reason(exc))) from None
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            if isinstance(cause, ray.exceptions.RayActorError):
                raise self._stop_after_death(cause) from None
            self.stop()
            hint = "" if debug_enabled() else " (rerun with --debug for the traceback)"
            if isinstance(root_cause(exc), OSError):  # the run folder became unwritable, the disk full, ...
                hint = ": fix that, then " + RESUME_HINT.format(run_dir=self.run_dir)
            raise RunFailed(f"run stopped: {who} failed: {describe(exc)}{hint}") from exc
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ActorDied) as exc:
            raise self._stop_after_death(exc) from None
        return self.stop()

    def _drain_evals(self, on_progress: Callable[[dict[str, Any]], None] | None, poll_s: float) -> None:
        """After the last update: let the collectors play the scheduled evaluations of every published
        checkpoint (no more training games), each game bounded by game_timeout_s."""
        import ray

        plan = self.eval_plan()
        per_ckpt = len(plan.specs) * plan.games
        rounds = -(-per_ckpt // max(1, self.cfg.num_eval_workers // len(self.actors["collectors"])))
        timeout_s = (rounds + 1) * self.cfg.game_timeout_s
        waiting = [c.drain_evals.remote(timeout_s) for c in self.actors["collectors"]]
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=poll_s)
            ray.get(done)
            if on_progress:
                on_progress(self.progress())

    def _inference_actors(self) -> list[Any]:
        return [a for pool in self.actors.get("engines", {}).values() for a in pool]

    def _actor_names(self) -> dict[str, str]:
        """Actor id (hex) -> name as the run's messages give it ('the learner', 'the inference-main-0')."""
        names = {}
        for key in ("recorder", "league", "buffer", "learner"):
            if key in self.actors:
                names[self.actors[key]._actor_id.hex()] = f"the {key}"
        for i, c in enumerate(self.actors.get("collectors", [])):
            names[c._actor_id.hex()] = f"the collector-{i}"
        for engine, pool in self.actors.get("engines", {}).items():
            for i, a in enumerate(pool):
                names[a._actor_id.hex()] = f"the inference-{engine}-{i}"
        return names

    def _check_alive(self) -> None:
        """Ask every stateful actor a cheap question: a dead one raises ActorDied at once, one that does
        not answer within ANSWER_TIMEOUT_S raises ActorHung (both name the actor)."""
        names = self._actor_names()
        asked = {
            names[a._actor_id.hex()]: getattr(a, method).remote()
            for key, method in (("recorder", "snapshot"), ("league", "get_current_ckpt"), ("buffer", "size"))
            if (a := self.actors.get(key)) is not None
        }
        asked.update({names[c._actor_id.hex()]: c.stats.remote() for c in self.actors.get("collectors", [])})
        check_answers(asked)

    def _stop_after_death(self, exc: BaseException) -> RunStopped:
        """An actor of the run died or hung: stop the others (the last checkpoint stays complete), record it
        in metrics.jsonl and return the one-line error that says how to continue."""
        if not isinstance(exc, ActorDied):  # a Ray error of the run's own calls (the learner's train, ...)
            actor_id = getattr(exc, "actor_id", None)
            who = self._actor_names().get(actor_id or "", "an actor")
            exc = ActorDied(who, death_reason(exc) if actor_id else type(exc).__name__)
        who, what, event, why = exc.who, exc.what, exc.event, exc.why
        try:
            self.stop(timeout_s=60.0, release=False)
        except Exception:  # the stop of a broken run must not hide why it broke
            self.abort(release=False)
        step = max(checkpoint_steps(self.run_dir), default=0)
        with contextlib.suppress(OSError):  # an unwritable run folder must not hide why the run stopped
            record_event(self.run_dir, event, actor=who, reason=why, last_checkpoint_step=step)
        self.lock.release()
        fix = "fix that, then " if why.startswith(FAILED_TO_START) else ""
        return RunStopped(
            f"{who} {what}; the run stopped at its last complete checkpoint (step {step}): "
            + fix
            + RESUME_HINT.format(run_dir=self.run_dir)
        )

    # ---- stop
    def stop(self, timeout_s: float = 300.0, release: bool = True) -> dict[str, Any]:
        """Stop cleanly: the update in progress finishes (its checkpoint complete), games are cancelled,
        files are flushed, the local Ray cluster is shut down; then (`release`) the run directory's lock
        is let go. Returns the run's summary."""
        try:
            return self._stop(timeout_s)
        finally:
            if release:
                self.lock.release()

    def _stop(self, timeout_s: float) -> dict[str, Any]:
        import ray

        if not ray.is_initialized() or not self.actors:
            return self.summary
        learner = self.actors.get("learner")
        if learner is not None:
            learner.stop.remote()
            if self._train_ref is not None:
                ray.wait([self._train_ref], timeout=timeout_s)
        if "buffer" in self.actors:
            self.actors["buffer"].stop.remote()
        for c in self.actors.get("collectors", []):
            c.stop.remote()
        ray.wait(self._collect_refs, num_returns=len(self._collect_refs), timeout=60)
        snap = self._close_files()
        self.summary = {"run_dir": str(self.run_dir), "elapsed_s": time.time() - self.started_at, **snap}
        self.actors.clear()
        if self._owns_ray:
            stop_ray()
        from unstable_core.report.plots import plot_run

        try:
            self.summary["plots"] = [str(p) for p in plot_run(self.run_dir)]
        except Exception as exc:  # a picture is not worth losing the summary
            self.summary["plots_error"] = str(exc)
        if self.learn:  # what was learned, and its test: the sentence the summary opens with
            from unstable_core.report.learning_verdict import run_verdict

            try:
                self.summary["learning"] = run_verdict(self.run_dir).to_dict()
            except Exception as exc:  # as the pictures: not worth losing the summary
                self.summary["learning_error"] = describe(exc)
        try:
            atomic_write_json(self.run_dir / "summary.json", self.summary)
        except OSError as exc:  # the summary is still returned (and printed)
            self.summary["summary_error"] = f"summary.json not written: {exc}"
        return self.summary

    def _close_files(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Flush the recorder's and the league's files, each on its own with a time limit (a dead or hung
        actor must not keep the other's data from the disk); then their last numbers, as far as they
        answer (`stop_errors` says which did not), and the `stopped` event in metrics.jsonl."""
        import ray

        errors: list[str] = []

        def ask(name: str, actor: Any, method: str) -> Any:
            try:
                return ray.get(getattr(actor, method).remote(), timeout=timeout_s)
            except Exception as exc:  # keep going: shutting down matters more than the last numbers
                errors.append(f"{name}.{method}: {describe(exc)}")
                return None

        recorder, league = self.actors["recorder"], self.actors["league"]
        ask("recorder", recorder, "close")
        ask("league", league, "flush")
        snap = ask("recorder", recorder, "snapshot") or {}
        models = ask("league", league, "to_dict")
        if models is not None:
            snap["registry"] = models
        collected = [
            ask(f"collector-{i}", c, "stats") for i, c in enumerate(self.actors.get("collectors", []))
        ]
        try:
            self._record_stop(snap.get("counts"), collected)
        except OSError as exc:  # a run folder that cannot be written: the stop goes on, the cause is shown
            errors.append(f"metrics.jsonl: {describe(exc)}")
        if errors:
            snap["stop_errors"] = errors
        return snap

    def _record_stop(self, counts: dict[str, int] | None, collected: list[dict[str, int] | None]) -> None:
        """This process's games and restarts, as a `stopped` event of metrics.jsonl: games each collector
        had the recorder record (None: it did not answer), games the recorder recorded, games replayed and
        inference actor restarts seen. Games numbered from `index_base` on are this process's, so a
        check can compare what was played with what games.jsonl holds (benchmarks/faults.py)."""
        record_event(
            self.run_dir,
            "stopped",
            index_base=self.index_base,
            games_sent=[None if c is None else c["recorded"] for c in collected],
            games_recorded=None
            if counts is None
            else counts.get("train_games", 0) + counts.get("eval_games", 0),
            inference_retries=None if counts is None else counts.get("inference_retries", 0),
            inference_restarts=self._watch.restarts if self._watch is not None else 0,
        )

    def abort(self, release: bool = True) -> dict[str, Any]:
        """Stop at once: shut the local Ray cluster down without waiting for the update in progress
        (checkpoints are written atomically, so the last complete one stays usable)."""
        self.actors.clear()
        if self._owns_ray:
            stop_ray()
        if release:
            self.lock.release()
        self.summary = {"run_dir": str(self.run_dir), "aborted": True}
        return self.summary


class RecorderActor:
    """Builds the chosen trackers inside the actor (they may hold files or sockets) around a `Recorder`."""

    def __init__(
        self,
        run_dir: str,
        trackers: list[tuple[Any, dict[str, Any]]],
        failure_window: int = 20,
        max_failure_rate: float = 0.5,
        learner_step: int = 0,
    ) -> None:
        from unstable_core.runtime.recorder import Recorder

        built = [cls(**kw) for cls, kw in trackers]
        self._t = Recorder(run_dir, built, failure_window, max_failure_rate, learner_step)

    def add_game(self, result) -> None:
        self._t.add_game(result)

    def log_learner(self, metrics, step) -> None:
        self._t.log_learner(metrics, step)

    def log_eval(self, metrics, version) -> None:
        self._t.log_eval(metrics, version)

    def add_count(self, key, n=1) -> None:
        self._t.add_count(key, n)

    def set_inference_stats(self, stats) -> None:
        self._t.set_inference_stats(stats)

    def snapshot(self):
        return self._t.snapshot()

    def close(self) -> None:
        self._t.close()


def _eval_like(spec, opponent: str):
    from unstable_core.types import EvalEnvSpec

    return EvalEnvSpec(
        env_id=spec.env_id,
        num_players=spec.num_players,
        prompt_template=spec.prompt_template,
        fixed_opponent=opponent,
    )


def build(config: RunConfig | None = None, resume: str | os.PathLike | None = None, **overrides: Any) -> Run:
    """A training run from a `RunConfig` and/or keyword overrides: the reference's build() names and values
    work too (None for its defaults, opponent_sampling_strategy="none", its vllm_config keys).
    `resume=RUN_DIR` continues that run from its last complete checkpoint (its config.toml, with the
    overrides that do not change what it learns)."""
    if resume is not None:
        if config is not None:
            raise ConfigError("build(resume=...) reads the run's own config.toml: pass no config")
        cfg, changed = resume_config(resume, overrides)
        return Run(cfg, resume=resume, resume_changes=changed)
    base = config.to_dict() if config is not None else {}
    return Run(config_from_dict(merge_layers(base, overrides)))
