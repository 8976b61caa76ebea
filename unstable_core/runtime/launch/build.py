"""The ONE builder of a run's actors, for `run`, `play`, `eval` and the benchmarks: `build_graph` starts
a run's from a `RunPlan`, one function per phase (recorder, league, buffer, engines, collectors, learner),
and `build_eval_graph` an evaluation's (a plan that plays a fixed schedule: no buffer, no learner); both
return an `ActorGraph`. A resumed run's actors start from its checkpoint's state. Nothing plays until
`start_collection`, nothing learns until the learner's `train` is called (`Run.start` does both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unstable_core.league.league import league_path
from unstable_core.runtime.graph import ActorGraph
from unstable_core.runtime.launch.placement import LEARNER_WORKER_CPUS
from unstable_core.runtime.launch.plan import Placed, RunPlan
from unstable_core.runtime.recovery.resume import ResumePoint, record_resume


def build_graph(
    plan: RunPlan,
    run_dir: Path,
    placed: Placed,
    point: ResumePoint | None = None,
    index_base: int = 0,
    num_eval: int | None = None,
    collector_cls: type | None = None,
) -> ActorGraph:
    """Every actor of a run's `plan` as `placed` on the cluster, phase by phase, in `run_dir`; from `point`'s
    state in a resumed run.
    `num_eval`: the evaluation games in flight (default the config's); `collector_cls`: a Collector
    subclass (a benchmark's, which measures)."""
    recorder = start_recorder(plan, run_dir, point)
    league = start_league(plan, run_dir, point)
    graph = ActorGraph(recorder, league, {}, buffer=start_buffer(plan, point) if plan.learn else None)
    graph.adapter_store, store_name = start_adapter_store()
    graph.engines = start_engines(plan, placed, store_name)
    num_eval = plan.cfg.num_eval_workers if num_eval is None else num_eval
    schedulers = [scheduler_of(plan, s, index_base, point, num_eval) for s in range(plan.cfg.num_collectors)]
    graph.collectors = start_collectors(plan, graph, schedulers, collector_cls)
    if plan.learn:
        workers = start_learner(plan, run_dir, graph, placed, point)
        graph.learner, graph.learner_workers = workers[0], workers[1:]
        graph.probes = start_probes(plan, run_dir)
    return graph


def build_eval_graph(plan: RunPlan, out_dir: Path, placed: Placed) -> ActorGraph:
    """The actors of a plan that plays its fixed schedule and learns nothing (an evaluation's), in `out_dir`:
    the recorder, the league of the schedule's models, the engines, and collectors that each play their
    share of the games in order."""
    from unstable_core.runtime.actors.scheduler import FixedScheduler

    shards = plan.cfg.num_collectors
    schedulers = [FixedScheduler(plan.schedule.games[shard::shards]) for shard in range(shards)]
    graph = ActorGraph(start_recorder(plan, out_dir, None), start_eval_league(plan, out_dir), {})
    graph.adapter_store, store_name = start_adapter_store()
    graph.engines = start_engines(plan, placed, store_name)
    graph.collectors = start_collectors(plan, graph, schedulers)
    return graph


def start_probes(plan: RunPlan, run_dir: Path) -> Any:
    """The probe actor of the scheduled evaluation's probes (--eval-probe), on the run directory's node and
    its CPU (it reserves no GPU); None without probes."""
    scheduled = plan.scheduled_eval
    if scheduled is None or not scheduled.probes:
        return None
    from unstable_core.runtime.actors.probes import ProbeActor

    cfg = plan.cfg
    return remote(ProbeActor, scheduling_strategy=on_this_node()).remote(
        str(run_dir), cfg.model_name, cfg.prompt_template, scheduled.probes, device="cpu", threads=2
    )


def remote(cls: type, **options: Any) -> Any:
    """`cls` as a Ray actor class that reserves no CPU (the run's actors share the machine's cores)."""
    import ray

    return ray.remote(cls).options(num_cpus=0, **options)


def on_this_node() -> Any:
    """The scheduling strategy that places an actor on this (the driver's) node, which holds the run
    directory: the actors that read or write it run there, as no node shares its filesystem."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def start_recorder(plan: RunPlan, run_dir: Path, point: ResumePoint | None) -> Any:
    """The recorder: games.jsonl, metrics.jsonl and the chosen trackers."""
    from unstable_core.runtime.actors.recorder import RecorderActor

    cfg = plan.cfg
    return remote(RecorderActor, scheduling_strategy=on_this_node()).remote(
        str(run_dir),
        plan.components.trackers,
        cfg.failure_window,
        cfg.max_failure_rate,
        point.step if point else 0,
    )


def start_league(plan: RunPlan, run_dir: Path, point: ResumePoint | None) -> Any:
    """A run's league of rated models (its file: `league_path`): the current checkpoint and every fixed
    opponent; from the checkpoint's state in a resumed run (one resumed before its first checkpoint
    starts over)."""
    import ray

    from unstable_core.runtime.actors.league import LeagueActor

    league = remote(LeagueActor, scheduling_strategy=on_this_node()).remote(
        str(league_path(run_dir)), state=point.league if point else None, fresh=True
    )
    if point is None:
        ray.get(league.add_checkpoint.remote("ckpt-0", None, 0, inherit=False))
    else:  # the league as it was when the checkpoint was saved, then the checkpoint itself
        ray.get(league.add_checkpoint.remote(f"ckpt-{point.step}", str(point.checkpoint), point.step))
    for name in plan.fixed_opponents:
        ray.get(league.add_fixed.remote(name))
    return league


def start_eval_league(plan: RunPlan, out_dir: Path) -> Any:
    """An evaluation's league: the models of its fixed schedule, added to the file of an earlier
    evaluation in the same folder."""
    import ray

    from unstable_core.runtime.actors.league import LeagueActor

    league = remote(LeagueActor, scheduling_strategy=on_this_node()).remote(
        str(league_path(out_dir)), state=None, fresh=False
    )
    for e in plan.schedule.league:
        add = league.add_fixed.remote(e.uid) if e.fixed else None
        ray.get(add or league.add_checkpoint.remote(e.uid, e.adapter, e.step, inherit=False))
    return league


def start_buffer(plan: RunPlan, point: ResumePoint | None) -> Any:
    """The buffer between collectors and learner, with the reward pipeline and its saved statistics."""
    import ray

    from unstable_core.runtime.actors.buffer import BUFFERS

    comp, cfg = plan.components, plan.cfg
    buffer = remote(BUFFERS[getattr(comp.learner, "buffer_kind", "step")]).remote(
        cfg.effective_buffer_size, comp.final, comp.step, comp.sampling, max_staleness=cfg.max_staleness,
        admission=cfg.admission, batch_size=cfg.batch_size,
    )  # fmt: skip
    if point is not None:
        ray.get([buffer.load_state_dict.remote(point.rewards), buffer.set_policy_version.remote(point.step)])
    return buffer


def record_resumed_state(run_dir: Path, record: dict[str, Any], graph: ActorGraph) -> None:
    """The resume record of metrics.jsonl, with the ratings and reward state read back from the live actors."""
    import ray

    models = ray.get(graph.league.to_dict.remote())["models"]
    record["ratings_loaded"] = {m["uid"]: {k: m[k] for k in ("mu", "sigma", "games")} for m in models}
    if graph.buffer is not None:
        record["rewards_loaded"] = ray.get(graph.buffer.state_dict.remote())
    record_resume(run_dir, record)


def start_adapter_store() -> tuple[Any, str]:
    """The adapter store and its actor name, on this (the driver's) node, which holds the run directory:
    the inference actors get every adapter from it as bytes, wherever they run. It holds nothing that
    cannot be read again, so Ray restarts it after a crash. The inference actors find it by name: a handle
    among their constructor's arguments would make Ray keep those in its object store, with an error line
    in every run's output."""
    import uuid

    from unstable_core.runtime.actors.adapter_store import AdapterStore

    name = f"unstable-adapter-store-{uuid.uuid4().hex[:12]}"
    store = remote(
        AdapterStore, name=name, scheduling_strategy=on_this_node(), max_restarts=-1, max_task_retries=-1
    ).remote()
    return store, name


def start_engines(plan: RunPlan, placed: Placed, adapter_store: str | None = None) -> dict[str, list[Any]]:
    """The inference actors of each engine (the main model, and each fixed opponent of another model),
    sent their adapters by `adapter_store`."""
    from unstable_core.runtime.actors.inference import create_engines

    return create_engines(
        placed.engines,
        gpu=placed.placement.inference_gpus,
        threads=placed.threads.inference,
        main_actors=placed.placement.num_inference_actors,
        adapter_store=adapter_store,
    )


def start_collectors(
    plan: RunPlan, graph: ActorGraph, schedulers: list[Any], collector_cls: type | None = None
) -> list[Any]:
    """The collectors, one per scheduler of the games (`Run` starts their collection)."""
    from unstable_core.games.branching import Branching
    from unstable_core.inference.base import SamplingParams
    from unstable_core.runtime.actors.collector import Collector

    cfg = plan.cfg
    branching = Branching(cfg.branch_samples, cfg.branch_max_moves, cfg.branch_depth, cfg.branch_discount)
    seed = cfg.seed if plan.schedule is not None else None  # an evaluation's games repeat with its seed
    params = SamplingParams(
        temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_generation_len, seed=seed
    )
    return [
        # collect() runs for the whole run: stop() and stats() need room beside it
        remote(collector_cls or Collector, max_concurrency=4).remote(
            engines=graph.engines,
            tokenizers=plan.engines,
            buffer=graph.buffer,
            league=graph.league,
            recorder=graph.recorder,
            scheduler=scheduler,
            params=params,
            max_turns=cfg.max_turns,
            game_timeout_s=cfg.game_timeout_s,
            error_allowance=cfg.error_allowance,
            branching=branching,
            scheduled_eval=plan.scheduled_eval if plan.learn else None,
        )
        for scheduler in schedulers
    ]


def scheduler_of(plan: RunPlan, shard: int, index_base: int, point: ResumePoint | None, num_eval: int) -> Any:
    """A run's collector `shard`'s games: its samplers' (from its saved state)."""
    from unstable_core.runtime.actors.scheduler import GameScheduler

    cfg, comp, shards = plan.cfg, plan.components, plan.cfg.num_collectors
    scheduler = GameScheduler(
        comp.env_sampler(
            plan.train_envs, plan.eval_specs(num_eval), seed=cfg.seed + shard, **cfg.env_sampler_config
        ),
        comp.model_sampler(seed=cfg.seed + shard, **cfg.sampler_config),
        seed=cfg.seed,
        shard=shard,
        num_shards=shards,
        index_base=index_base,
    )
    saved = point.collector_state(shard) if point is not None else None
    if saved:
        scheduler.load_state_dict(saved)
    return scheduler


def start_collection(
    collectors: list[Any], num_train: int, num_eval: int, max_games: int | None
) -> list[Any]:
    """Start the collection: each collector gets its share of the games in flight (and of `max_games`)."""

    def share(n: int, i: int) -> int:
        return n // len(collectors) + (1 if i < n % len(collectors) else 0)

    return [
        c.collect.remote(
            share(num_train, i), share(num_eval, i), None if max_games is None else share(max_games, i)
        )
        for i, c in enumerate(collectors)
    ]


def start_learner(
    plan: RunPlan, run_dir: Path, graph: ActorGraph, placed: Placed, point: ResumePoint | None
) -> list[Any]:
    """The learner's workers (one, or `learner_workers` ranks of one process group in one placement group),
    built from the run's LearnerConfig; rank 0 resumes from the checkpoint and the others take its state
    when they join (`Run` starts their training). Rank 0 first: it alone writes the run directory."""
    import ray

    from unstable_core.runtime.actors.learner import LearnerActor

    cfg, world, placement = plan.cfg, plan.cfg.learner_workers, placed.placement
    # train, and beside it stop and phase (the run's stall watch)
    options: dict[str, Any] = {"num_gpus": placement.learner_gpus, "max_concurrency": 3}
    if world > 1:
        options["scheduling_strategy"] = learner_placement_group(world, placement.learner_gpus)
    elif driver_node_gpus() >= placement.learner_gpus:  # else wherever its GPU is (docs/gpus-and-clusters.md)
        options["scheduling_strategy"] = on_this_node()
    workers = []
    for rank in range(world):
        if world > 1:
            options["scheduling_strategy"].placement_group_bundle_index = rank
        workers.append(
            remote(LearnerActor, **options).remote(
                plan.components.learner,
                plan.learner_config,
                cfg.algorithm_config,
                run_dir=str(run_dir),
                device=cfg.device,
                buffer=graph.buffer,
                league=graph.league,
                recorder=graph.recorder,
                torch_threads=placed.threads.learner,
                collectors=graph.collectors,
                resume_from=str(point.checkpoint) if point is not None and rank == 0 else None,
                max_nonfinite_updates=cfg.max_nonfinite_updates,
                keep_optimizer_states=cfg.keep_optimizer_states,
                compact_adapters=cfg.compact_adapters,
                rank=rank,
                world_size=world,
            )
        )
    if world > 1:
        group = ray.get(workers[0].learner_group.remote())
        ray.get([w.join_group.remote(group) for w in workers])
    return workers


def driver_node_gpus() -> float:
    """The GPUs of this (the driver's) node in the Ray cluster."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    return next((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["NodeID"] == here), 0.0)


def learner_placement_group(workers: int, gpus_each: float) -> Any:
    """A placement group of one bundle per learner worker (a CPU, and a whole GPU on GPUs), packed onto as few
    nodes as fit; bundle 0 (rank 0, which writes the run directory) on this driver's node."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundle: dict[str, float] = {"CPU": LEARNER_WORKER_CPUS}  # a core each, as the plan checked
    if gpus_each:
        bundle["GPU"] = gpus_each
    here = {f"node:{ray.util.get_node_ip_address()}": 0.001}
    group = placement_group([{**bundle, **here}] + [bundle] * (workers - 1), strategy="PACK")
    ray.get(group.ready(), timeout=60)
    return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_capture_child_tasks=False)
