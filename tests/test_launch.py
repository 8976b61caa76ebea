"""The one launch path: every command's actors come from a `RunPlan` through `runtime/launch/build.py`
(`build_graph`, or `build_eval_graph` for an evaluation: a plan that does not learn and plays a fixed
schedule), as an `ActorGraph`."""

from types import SimpleNamespace

import pytest

from unstable_core.eval.plan import plan_games
from unstable_core.eval.targets import EvalTarget, EvalTargets, eval_config
from unstable_core.runtime.graph import ActorGraph
from unstable_core.runtime.launch.placement import Placement
from unstable_core.runtime.launch.plan import LeagueEntry, RunPlan

ENV = "TicTacToe-v0-train"


def handle(name: str) -> SimpleNamespace:
    """A stand-in for a Ray actor handle: only its id is read (naming needs no Ray)."""
    return SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: name))


def test_an_actor_graph_names_every_actor_and_watches_only_the_stateful_ones():
    graph = ActorGraph(
        handle("r"), handle("l"), {"main": [handle("i0"), handle("i1")], "other": [handle("o0")]},
        collectors=[handle("c0")], buffer=handle("b"),
    )  # fmt: skip
    assert graph.names() == {
        "r": "the recorder", "l": "the league", "b": "the buffer", "c0": "the collector-0",
        "i0": "the inference-main-0", "i1": "the inference-main-1", "o0": "the inference-other-0",
    }  # fmt: skip
    assert set(graph.stateful()) == {"the recorder", "the league", "the buffer", "the collector-0"}
    assert [a._actor_id.hex() for a in graph.inference_actors()] == ["i0", "i1", "o0"]


def test_an_evaluation_is_a_plan_that_does_not_learn_and_plays_its_fixed_games(tiny_model, tmp_path):
    adapter = tmp_path / "step-3"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 48}')
    ckpt = EvalTarget("ckpt-3", "adapter", model=tiny_model, adapter=str(adapter), step=3)
    base = EvalTarget("base", "model", model=tiny_model)
    rand = EvalTarget("random", "player")
    targets = [ckpt, base, rand]
    planned = plan_games([ckpt, base], [rand], [ENV], games=3, seed=7)
    cfg = eval_config(targets, seed=7, backend="transformers")
    plan = RunPlan.fixed(cfg, EvalTargets.schedule(targets, planned))

    assert not plan.learn and plan.components.learner is None
    assert plan.schedule.games == tuple(g.spec for g in planned) and len(plan.schedule.games) == 6
    assert plan.schedule.league == (
        LeagueEntry("ckpt-3", str(adapter), 3),  # a checkpoint keeps its uid and step
        LeagueEntry("base"),  # served by the main engine
        LeagueEntry("random", fixed=True),
    )
    assert plan.engines == {"main": tiny_model}  # `random` needs no engine
    assert plan.max_loras() == 1 and plan.scheduled_eval is None
    kwargs = plan.backend_kwargs(Placement("cpu", 0.0, 0.0, 1, None))
    assert kwargs["max_loras"] == 1 and "max_lora_rank" not in kwargs
    vllm = RunPlan.fixed(
        eval_config(targets, backend="vllm", vllm_config={"dtype": "float32"}),
        EvalTargets.schedule(targets, planned),
    )
    kw = vllm.backend_kwargs(Placement("cpu", 0.0, 0.0, 1, None))
    assert kw["max_lora_rank"] == 64  # the checkpoint's rank 48, as vLLM accepts it (the run's own was 32)


def test_the_run_defaults_are_the_evaluations_unless_given(tiny_model):
    """Before: EvalSettings retyped 7 of RunConfig's defaults; now an evaluation plays with RunConfig's."""
    from unstable_core.config import RunConfig

    cfg = eval_config([EvalTarget("m", "model", model=tiny_model)], temperature=0.5)
    run = RunConfig()
    for name in (
        "top_p",
        "max_turns",
        "error_allowance",
        "max_batch_size",
        "max_model_len",
        "game_timeout_s",
    ):
        assert getattr(cfg, name) == getattr(run, name), name
    assert cfg.temperature == 0.5 and cfg.trackers == []


@pytest.mark.parametrize(
    ("module", "builder"),
    [("unstable_core/eval/play.py", "build_eval_graph"), ("benchmarks/rollout_engine.py", "build_graph")],
)
def test_no_command_or_benchmark_builds_actors_of_its_own(module, builder):
    """The actor classes are started in runtime/launch/build.py alone (play_games and the rollout benchmark
    each had their own copy of the wiring)."""
    from pathlib import Path

    text = (Path(__file__).parents[1] / module).read_text()
    for name in ("RecorderActor", "LeagueActor", "create_engines", "create_inference_actor"):
        assert name not in text, f"{module} starts {name} itself"
    assert builder in text


def test_a_fixed_scheduler_hands_out_its_games_in_order_as_ray_ships_it():
    """What a collector of an evaluation plays: its share of the schedule, in order, and no training game."""
    import pickle

    from unstable_core.errors import UnstableError
    from unstable_core.runtime.actors.scheduler import FixedScheduler

    model, rand = EvalTarget("m", "model", model="some-model"), EvalTarget("random", "player")
    specs = [g.spec for g in plan_games([model], [rand], [ENV], games=4, seed=7)]
    scheduler = pickle.loads(pickle.dumps(FixedScheduler(specs[1::2])))  # as Ray sends it to the collector
    assert (scheduler.shard, scheduler.num_shards) == (0, 1)
    scheduler.env_sampler.update(None)  # nothing to learn from a game
    assert [scheduler.next_eval(None) for _ in range(2)] == [specs[1], specs[3]]
    with pytest.raises(UnstableError, match="no training games"):
        scheduler.next_train(None)
