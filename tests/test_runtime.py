"""The Ray runtime on a real Ray session: a collector playing TextArena games through a real inference
actor (the tiny random-weight model), a failing environment, and an inference actor killed mid-run."""

import time
from pathlib import Path

import pytest
import ray

from unstable_core.config import RunConfig
from unstable_core.inference.base import SamplingParams
from unstable_core.io import read_jsonl
from unstable_core.plugins import get_registry
from unstable_core.runtime.actors.buffer import StepBuffer
from unstable_core.runtime.actors.collector import Collector
from unstable_core.runtime.actors.inference import create_inference_actor
from unstable_core.runtime.actors.league import LeagueActor
from unstable_core.runtime.actors.recorder import Recorder
from unstable_core.runtime.actors.scheduled_eval import ScheduledEval
from unstable_core.runtime.actors.scheduler import GameScheduler
from unstable_core.runtime.run import Run
from unstable_core.testing import local_ray
from unstable_core.types import EvalEnvSpec, TrainEnvSpec

pytestmark = pytest.mark.xdist_group("runtime-ray")  # one worker: its module fixtures start Ray once

TTT = "TicTacToe-v0-train"
MISSING_ENV = "NoSuchGame-v0"
MAX_NEW_TOKENS = 8
RESTARTING = (
    ray.exceptions.RayActorError,
    ray.exceptions.ActorUnavailableError,
    ray.exceptions.GetTimeoutError,
)


@pytest.fixture(scope="module")
def ray_session():
    with local_ray(num_cpus=4, namespace="unstable-tests"):
        yield


@pytest.fixture(scope="module")
def engine(ray_session, tiny_model):
    """One inference actor on the tiny model, shared by the collector tests of this module."""
    actor = create_inference_actor("transformers", {"model": tiny_model, "device": "cpu"})
    assert ray.get(actor.ping.remote(), timeout=180) == "pong"
    return actor


def wait_until(check, timeout_s: float = 180.0, what: str = "condition") -> None:
    """Poll `check()` until true, tolerating the errors of an actor that is (re)starting."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except RESTARTING:
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def start_collector(
    run_dir: Path,
    engine,
    tiny_model: str,
    specs: list[TrainEnvSpec],
    seed: int = 0,
    scheduled_eval=None,
    tracker_cls: type = Recorder,
):
    """A collector actor with a real league, buffer and recorder (all Ray actors), sampling `specs`."""
    reg = get_registry()
    league = ray.remote(LeagueActor).options(num_cpus=0).remote(str(run_dir / "league.json"))
    ray.get(league.add_checkpoint.remote("ckpt-0", None, 0, inherit=False))
    buffer = ray.remote(StepBuffer).options(num_cpus=0).remote(10_000)
    recorder = ray.remote(tracker_cls).options(num_cpus=0).remote(str(run_dir))
    scheduler = GameScheduler(
        reg.load("env_sampler", "random")(specs, seed=seed),
        reg.load("model_sampler", "mirror")(seed=seed),
        seed=seed,
    )
    collector = (
        ray.remote(Collector)
        .options(num_cpus=0, max_concurrency=4)
        .remote(
            engines={"main": [engine]},
            tokenizers={"main": tiny_model},
            buffer=buffer,
            league=league,
            recorder=recorder,
            scheduler=scheduler,
            params=SamplingParams(temperature=1.0, max_tokens=MAX_NEW_TOKENS),
            max_turns=20,
            game_timeout_s=120.0,
            scheduled_eval=scheduled_eval,
        )
    )
    return collector, league, buffer, recorder


def finish(recorder, league, num_games: int) -> tuple[dict, dict]:
    """Wait until the recorder has the collector's fire-and-forget game records, write games.jsonl;
    returns (recorder snapshot, league as a dict)."""
    recorded = lambda: ray.get(recorder.snapshot.remote())["counts"].get("train_games", 0)  # noqa: E731
    wait_until(lambda: recorded() >= num_games, what="game records")
    ray.get(recorder.close.remote())
    return ray.get(recorder.snapshot.remote()), ray.get(league.to_dict.remote())


def test_games_finish_and_produce_steps(engine, tiny_model, tmp_path):
    collector, league, buffer, recorder = start_collector(
        tmp_path, engine, tiny_model, [TrainEnvSpec(TTT, 2, 2)]
    )
    counts = ray.get(collector.collect.remote(2, 0, 4), timeout=300)
    assert counts == {"started": 4, "finished": 4, "failed": 0, "retries": 0, "recorded": 4}

    wait_until(lambda: ray.get(league.to_dict.remote())["env_games"].get(TTT) == 4, what="ratings of 4 games")
    finish(recorder, league, 4)
    games = read_jsonl(tmp_path / "games" / "games.jsonl")
    assert sorted(g["info"]["game_idx"] for g in games) == [0, 1, 2, 3]
    steps = [s for g in games for t in g["trajectories"] for s in t["steps"]]
    for g in games:
        info = g["info"]
        assert not info["failed"] and info["env_id"] == TTT
        assert info["models"] == {"0": "ckpt-0", "1": "ckpt-0"} and sorted(info["learner_pids"]) == [0, 1]
        assert info["num_turns"] == sum(len(t["steps"]) for t in g["trajectories"]) >= 1
        assert set(info["final_rewards"]) == {"0", "1"}
    for s in steps:
        assert s["prompt_ids"] and 1 <= len(s["completion_ids"]) <= MAX_NEW_TOKENS
        assert len(s["logprobs"]) == len(s["completion_ids"])
        assert s["model_uid"] == "ckpt-0" and s["policy_version"] == 0

    # mirror self-play: every step of every game is training data, and only those reach the buffer
    stats = ray.get(buffer.stats.remote())
    assert stats["games"] == 4 and stats["steps_added"] == stats["size"] == len(steps)


def test_a_dead_tracker_stops_collection_and_its_games_reach_neither_buffer_nor_ratings(
    engine, tiny_model, tmp_path
):
    """Before: the collector kept playing for the dead recorder (fire and forget), training on and rating
    games that never reached games.jsonl."""
    collector, league, buffer, recorder = start_collector(
        tmp_path, engine, tiny_model, [TrainEnvSpec(TTT, 2, 2)]
    )
    ray.kill(recorder, no_restart=True)
    with pytest.raises(ray.exceptions.RayTaskError) as stopped:
        ray.get(collector.collect.remote(2, 0, 4), timeout=300)
    assert isinstance(stopped.value.cause, ray.exceptions.RayActorError)  # the run names the dead actor
    assert ray.get(buffer.stats.remote())["games"] == 0
    assert ray.get(league.to_dict.remote())["env_games"].get(TTT, 0) == 0
    assert ray.get(collector.stats.remote())["recorded"] == 0


class SlowRecorder(Recorder):
    """A recorder that takes a second per game: stopping the collection finds games waiting for it."""

    def add_game(self, result) -> None:
        time.sleep(1.0)
        super().add_game(result)


def test_games_finished_when_collection_stops_are_rated_and_buffered_whole(engine, tiny_model, tmp_path):
    """Before: stopping cancelled a finished game while it waited for the recorder, so it reached
    games.jsonl but neither the ratings nor the buffer (a run's summary rated fewer games than it had)."""
    collector, league, buffer, recorder = start_collector(
        tmp_path, engine, tiny_model, [TrainEnvSpec(TTT, 2, 2)], tracker_cls=SlowRecorder
    )
    collecting = collector.collect.remote(4, 0)
    wait_until(lambda: ray.get(collector.stats.remote())["finished"] >= 3, what="3 finished games")
    ray.get(collector.stop.remote())
    counts = ray.get(collecting, timeout=120)

    recorded = ray.get(recorder.snapshot.remote())["counts"]["train_games"]
    assert counts["finished"] >= 3 and recorded == counts["recorded"] == counts["finished"]
    assert ray.get(league.to_dict.remote())["env_games"][TTT] == recorded
    assert ray.get(buffer.stats.remote())["games"] == recorded


def test_failing_env_is_recorded_as_failed_while_the_others_finish(engine, tiny_model, tmp_path):
    specs = [TrainEnvSpec(TTT, 2, 2), TrainEnvSpec(MISSING_ENV, 2, 2)]
    # game i is played in the i-th env the seeded sampler draws: replay those draws here
    twin = get_registry().load("env_sampler", "random")(specs, seed=3)
    expected = [twin.sample("train").env_id for _ in range(6)]
    assert TTT in expected and MISSING_ENV in expected, "pick a seed that draws both envs"
    bad = {i for i, env in enumerate(expected) if env == MISSING_ENV}

    collector, league, buffer, recorder = start_collector(tmp_path, engine, tiny_model, specs, seed=3)
    counts = ray.get(collector.collect.remote(2, 0, 6), timeout=300)
    assert counts == {"started": 6, "finished": 6 - len(bad), "failed": len(bad), "retries": 0, "recorded": 6}

    snap, _ = finish(recorder, league, 6)
    assert (snap["counts"]["train_games"], snap["counts"]["train_failed"]) == (6, len(bad))
    games = {g["info"]["game_idx"]: g for g in read_jsonl(tmp_path / "games" / "games.jsonl")}
    assert sorted(games) == list(range(6))
    for idx, g in games.items():
        info = g["info"]
        assert info["env_id"] == expected[idx]
        if idx in bad:
            assert info["failed"] and f"env {MISSING_ENV} raised in make" in info["error"]
            assert info["num_turns"] == 0 and info["final_rewards"] == {}
        else:
            assert not info["failed"] and info["error"] is None and info["num_turns"] >= 1
    assert ray.get(buffer.stats.remote())["games"] == 6 - len(bad)
    wait_until(lambda: ray.get(league.to_dict.remote())["env_games"] == {TTT: 6 - len(bad)}, what="ratings")


def test_killed_inference_actor_restarts_and_no_game_is_counted_twice(ray_session, tiny_model, tmp_path):
    cfg = RunConfig(
        model_name=tiny_model,
        train_envs=[f"{TTT}:2:2"],
        final_transforms=[],
        step_transforms=[],
        sampling_transforms=[],
        num_train_workers=2,
        num_eval_workers=0,
        max_generation_len=MAX_NEW_TOKENS,
        temperature=1.0,
        runs_dir=str(tmp_path),
        run_name="killed",
        device="cpu",
        trackers=[],
    )
    run = Run.open(cfg, learn=False).start()
    recorder, collector = run.actors.recorder, run.actors.collectors[0]
    engine = run.actors.engines["main"][0]
    played = lambda: ray.get(recorder.snapshot.remote())["counts"].get("train_games", 0)  # noqa: E731
    wait_until(lambda: played() >= 3, what="3 games before the kill")

    ray.kill(engine, no_restart=False)
    at_kill = played()
    wait_until(lambda: played() >= at_kill + 4, what="4 games after the kill")
    stats = ray.get(collector.stats.remote(), timeout=30)  # the collector answers while collecting
    assert stats["retries"] >= 1, "a game in flight at the kill should have been replayed"
    assert stats["failed"] == 0

    summary = run.stop()
    ready, _ = ray.wait(run._collect_refs, num_returns=len(run._collect_refs), timeout=0)
    assert len(ready) == len(run._collect_refs), "stop() should end the collection, not time out on it"
    games = read_jsonl(tmp_path / "killed" / "games" / "games.jsonl")
    idx = [g["info"]["game_idx"] for g in games]
    assert len(idx) == len(set(idx)) == summary["counts"]["train_games"] >= at_kill + 4
    assert not any(g["info"]["failed"] for g in games)
    assert summary["league"]["env_games"][TTT] == len(games)  # each game rated once
    assert summary["counts"]["inference_retries"] >= 1  # the replay is counted (counts/ in metrics.jsonl)


def test_collector_plays_scheduled_evaluations_beside_training_and_none_reach_the_buffer(
    engine, tiny_model, tmp_path
):
    """--eval-every: a checkpoint's evaluation games are played beside training games, logged against it,
    and none of them reaches the buffer."""
    plan = ScheduledEval((EvalEnvSpec(TTT, 2, fixed_opponent="base"),), every=1, games=4)
    collector, league, buffer, recorder = start_collector(
        tmp_path, engine, tiny_model, [TrainEnvSpec(TTT, 2, 2)], scheduled_eval=plan
    )
    ray.get(league.add_fixed.remote("base"))
    ray.get(league.add_checkpoint.remote("ckpt-1", None, 1))  # there before (as in a resumed run): skipped
    collecting = collector.collect.remote(2, 2)
    trained = lambda: ray.get(recorder.snapshot.remote())["counts"].get("train_games", 0) >= 2  # noqa: E731
    wait_until(trained, what="two training games")
    ray.get(league.add_checkpoint.remote("ckpt-2", None, 2))  # published: due at once (every 1 step)
    assert ray.get(collector.drain_evals.remote(300), timeout=320) == 0
    ray.get(collector.stop.remote())
    ray.get(collecting, timeout=120)
    ray.get(recorder.close.remote())
    snap = ray.get(recorder.snapshot.remote())
    evals = snap["evals"]
    assert list(evals) == [2] and evals[2][f"eval/{TTT}/vs_base/games"] == 4

    games = read_jsonl(tmp_path / "games" / "games.jsonl")
    eval_games = [g for g in games if g["info"]["eval"]]
    assert len(eval_games) == 4
    assert all(sorted(g["info"]["models"].values()) == ["base", "ckpt-2"] for g in eval_games)
    eval_steps = sum(len(t["steps"]) for g in eval_games for t in g["trajectories"] if t["collect_data"])
    assert eval_steps >= 2  # the checkpoint's turns are recorded (for the rates) ...
    train = [g for g in games if not g["info"]["eval"] and not g["info"]["failed"]]
    train_steps = sum(len(t["steps"]) for g in train for t in g["trajectories"] if t["collect_data"])
    stats = ray.get(buffer.stats.remote())
    assert train and stats["games"] == len(train)  # ... but only training games reach the buffer
    assert stats["steps_added"] + stats["steps_stale_on_add"] == train_steps


def test_the_learners_peak_memory_is_reported_in_gb():
    """metrics.jsonl's peak_rss_gb: what the OOM killer compares, so a user sees how close an update came."""
    import psutil

    from unstable_core.runtime.actors.learner import peak_rss_gb

    block = bytearray(300 << 20)  # 300 MiB, touched page by page so that it is resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    now_gb = psutil.Process().memory_info().rss / (1 << 30)
    assert now_gb > 0.29 and now_gb - 0.01 <= peak_rss_gb() < 4 * now_gb  # GB, not KiB or MiB
