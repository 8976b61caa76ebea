"""Nothing lost and never a hang when an actor dies: games reach games.jsonl as they are recorded, stop()
flushes each actor on its own, and the run's liveness checks name the actor that died or did not answer
(real Ray actors)."""

import asyncio
import json
import os
import signal
import time

import pytest
import ray

from unstable_core.config import RunConfig
from unstable_core.errors import RunStopped, UnstableError
from unstable_core.io import read_jsonl
from unstable_core.runtime.actors.buffer import StepBuffer
from unstable_core.runtime.actors.collector import Collector
from unstable_core.runtime.actors.league import LeagueActor
from unstable_core.runtime.actors.recorder import Recorder, RecorderActor
from unstable_core.runtime.graph import ActorGraph
from unstable_core.runtime.recovery.liveness import ActorDied, ActorHung, InferenceWatch, check_answers
from unstable_core.runtime.recovery.stop_decision import decide_stop
from unstable_core.runtime.run import Run
from unstable_core.testing import local_ray
from unstable_core.types import GameInformation, GameResult

pytestmark = pytest.mark.xdist_group("liveness-ray")  # one worker: its module fixture starts Ray once


@pytest.fixture(scope="module")
def ray_session():
    with local_ray(num_cpus=2, namespace="unstable-liveness"):
        yield


def game(idx: int) -> GameResult:
    info = GameInformation(
        game_idx=idx, env_id="E", seed=idx, eval=False, models={0: "ckpt-0", 1: "base"}, learner_pids=[0],
        final_rewards={0: 1.0, 1: -1.0}, failed=False, num_turns=3,
    )  # fmt: skip
    return GameResult(info=info)


def test_each_game_reaches_games_jsonl_when_it_is_recorded(tmp_path):
    """Before: up to 64 games (2 s) waited in the recorder's memory, lost when it died."""
    recorder = Recorder(tmp_path)
    recorder.add_game(game(0))
    recorder.add_game(game(1))
    assert [g["info"]["game_idx"] for g in read_jsonl(tmp_path / "games" / "games.jsonl")] == [0, 1]


def test_a_killed_tracker_loses_no_recorded_game(ray_session, tmp_path):
    recorder = ray.remote(RecorderActor).options(num_cpus=0).remote(str(tmp_path), [])
    for i in range(3):
        recorder.add_game.remote(game(i))
    assert ray.get(recorder.snapshot.remote())["counts"]["train_games"] == 3
    ray.kill(recorder, no_restart=True)
    assert len(read_jsonl(tmp_path / "games" / "games.jsonl")) == 3


def wait_until_dead(call, timeout_s: float = 60.0) -> None:
    """Wait until `call()` (a killed actor's method, `.remote()`d) raises RayActorError: ray.kill returns before
    the actor is gone, and on a loaded machine a call made at once can still be served (CI saw it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(call())
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def started_run(tiny_model: str, tmp_path) -> Run:
    """A Run with a real recorder and league (rated once, not yet saved) and nothing else started."""
    cfg = RunConfig(model_name=tiny_model, runs_dir=str(tmp_path), run_name="r", trackers=[])
    run = Run.open(cfg, learn=False)
    remote = lambda cls: ray.remote(cls).options(num_cpus=0)  # noqa: E731
    recorder = remote(RecorderActor).remote(str(run.run_dir), [])
    league = remote(LeagueActor).remote(str(run.run_dir / "league.json"), save_every_s=3600)
    run.actors = ActorGraph(recorder, league, {})
    ray.get(league.add_checkpoint.remote("ckpt-0", None, 0, inherit=False))
    ray.get(league.add_fixed.remote("base"))
    # rated in memory only: save_every_s keeps it off the disk until a flush
    ray.get(league.update_ratings.remote(["ckpt-0", "base"], [1.0, -1.0], "E"))
    ray.get(run.actors.recorder.add_game.remote(game(0)))
    return run


def test_stop_flushes_the_league_when_the_tracker_is_dead(ray_session, tiny_model, tmp_path):
    """Before: the recorder's dead snapshot raised first, so the league's last ratings never reached disk."""
    run = started_run(tiny_model, tmp_path)
    ray.kill(run.actors.recorder, no_restart=True)
    wait_until_dead(run.actors.recorder.snapshot.remote)
    summary = run.stop()
    saved = {m["uid"]: m for m in json.loads((run.run_dir / "league.json").read_text())["models"]}
    assert saved["ckpt-0"]["games"] == 1 and saved["ckpt-0"]["wins"] == 1
    assert summary["league"]["current"] == "ckpt-0"
    assert any(e.startswith("recorder.close: ") for e in summary["stop_errors"])
    stopped = [r for r in read_jsonl(run.run_dir / "metrics.jsonl") if r.get("event") == "stopped"]
    assert len(stopped) == 1 and stopped[0]["games_recorded"] is None  # the recorder did not answer


def test_stop_closes_the_tracker_when_the_league_is_dead(ray_session, tiny_model, tmp_path):
    run = started_run(tiny_model, tmp_path)
    ray.kill(run.actors.league, no_restart=True)
    wait_until_dead(run.actors.league.get_current_ckpt.remote)
    summary = run.stop()
    assert summary["counts"]["train_games"] == 1  # the recorder still answered
    assert len(read_jsonl(run.run_dir / "games" / "games.jsonl")) == 1
    assert "league" not in summary and any(e.startswith("league.flush: ") for e in summary["stop_errors"])
    (stopped,) = [r for r in read_jsonl(run.run_dir / "metrics.jsonl") if r.get("event") == "stopped"]
    assert (stopped["index_base"], stopped["games_sent"], stopped["games_recorded"]) == (0, [], 1)


class Answering:
    """A stand-in actor: answers `pid` and `ping` (an inference actor's liveness questions), or hangs, or
    fails to start."""

    def __init__(self, fail: str | None = None) -> None:
        if fail:
            raise UnstableError(fail)

    def pid(self) -> int:
        return os.getpid()

    async def ping(self) -> str:
        return "pong"

    def hang(self) -> None:
        time.sleep(3600)


def answering(**options):
    return ray.remote(Answering).options(num_cpus=0, **options)


def test_check_answers_names_the_actor_that_died_or_did_not_answer(ray_session):
    alive, dead, stuck = answering().remote(), answering().remote(), answering(max_concurrency=2).remote()
    ray.get([alive.pid.remote(), dead.pid.remote(), stuck.pid.remote()])
    ray.kill(dead, no_restart=True)
    wait_until_dead(dead.pid.remote)  # ray.kill does not wait: a call right after it may still be answered
    with pytest.raises(ActorDied, match=r"^the collector-1: its process died$"):
        check_answers({"the recorder": alive.pid.remote(), "the collector-1": dead.pid.remote()})
    stuck.hang.remote()
    with pytest.raises(ActorHung) as hung:
        check_answers(
            {"the recorder": alive.pid.remote(), "the collector-0": stuck.hang.remote()}, timeout_s=1
        )
    assert (hung.value.who, hung.value.what) == ("the collector-0", "actor did not answer within 1 s")
    ray.kill(stuck)


def test_an_actor_that_failed_to_start_shows_its_error(ray_session):
    broken = answering().remote(fail="checkpoint step-3 is corrupt")
    with pytest.raises(ActorDied, match=r"^the learner: it failed to start: checkpoint step-3 is corrupt$"):
        check_answers({"the learner": broken.pid.remote()})


def test_a_hung_actor_stops_the_run_saying_it_did_not_answer(ray_session, tiny_model, tmp_path):
    """Before: 'an actor actor died (GetTimeoutError)'."""
    run = started_run(tiny_model, tmp_path)
    stopped = run._stop_after_death(decide_stop(ActorHung("the collector-0", 300), "collection", run.run_dir))
    assert isinstance(stopped, RunStopped)
    assert str(stopped).startswith(
        "the collector-0 actor did not answer within 300 s; the run stopped at its last complete checkpoint "
        f"(step 0): continue it with `unstable run --resume {run.run_dir}`"
    )
    event = [r for r in read_jsonl(run.run_dir / "metrics.jsonl") if r.get("event")][-1]
    assert (event["event"], event["actor"]) == ("actor_hung", "the collector-0")


def poll_until(watch: InferenceWatch, done, timeout_s: float = 120.0) -> list:
    """Poll `watch` every 0.2 s until `done(lines so far)`; the lines."""
    lines: list = []
    deadline = time.monotonic() + timeout_s
    while not done(lines):
        assert time.monotonic() < deadline, f"the watch saw no change: {lines}"
        lines += watch.poll()
        time.sleep(0.2)
    return lines


def test_inference_watch_reports_a_restart_and_stops_on_an_actor_dead_for_good(ray_session):
    """Before: an inference actor that never came back left every game waiting 3 x 300 s, in silence."""
    actor = answering(max_restarts=1).remote()
    watch = InferenceWatch({"the inference-main-0": actor})
    poll_until(watch, lambda _: watch.pids)
    first = watch.pids["the inference-main-0"]
    os.kill(first, signal.SIGKILL)
    lines = poll_until(watch, bool)
    second = watch.pids["the inference-main-0"]
    assert lines == [
        (
            "the inference-main-0",
            f"the inference-main-0 restarted (its process {first} died; now {second}): the games it was "
            "playing are replayed",
        )
    ]
    os.kill(second, signal.SIGKILL)  # no restart left
    with pytest.raises(ActorDied) as died:
        poll_until(watch, lambda _: False)
    assert died.value.who == "the inference-main-0"
    assert died.value.why == "its process died, and Ray could not restart it"


def test_inference_watch_stops_on_an_actor_that_does_not_answer(ray_session):
    actor = answering(max_concurrency=1).remote()
    watch = InferenceWatch({"the inference-main-0": actor}, timeout_s=300)
    poll_until(watch, lambda _: watch.pids)
    actor.hang.remote()  # its one thread busy: the next question waits
    assert watch.poll() == []
    with pytest.raises(ActorHung, match="the inference-main-0: did not answer within 300 s"):
        watch.poll(now=time.monotonic() + 301)
    ray.kill(actor)


def test_a_game_stops_waiting_for_an_inference_actor_dead_for_good(ray_session):
    """Before: the collector pinged a dead actor for 300 s per replay (3 replays per game)."""
    dead = answering().remote()
    ray.get(dead.ping.remote())
    ray.kill(dead, no_restart=True)
    wait_until_dead(dead.ping.remote)
    collector = Collector(
        engines={"main": [dead]}, tokenizers={}, buffer=None, league=None, recorder=None, scheduler=None,
        params=None, restart_timeout_s=3600,
    )  # fmt: skip
    deadline = time.monotonic() + 3600
    assert asyncio.run(collector._await_actors({"main"}, 1, 0, deadline)) is False


def recording_collector(tmp_path, buffer_cls) -> tuple[Collector, object, object]:
    """A collector (no engines: games are handed to `_record`) with a real recorder, league (ckpt-0 and
    base) and buffer of `buffer_cls`; returns it, the buffer and the league."""
    remote = lambda cls: ray.remote(cls).options(num_cpus=0)  # noqa: E731
    buffer = remote(buffer_cls).remote(100)
    recorder = remote(RecorderActor).remote(str(tmp_path), [])
    league = remote(LeagueActor).remote(str(tmp_path / "league.json"), save_every_s=3600)
    ray.get(league.add_checkpoint.remote("ckpt-0", None, 0, inherit=False))
    ray.get(league.add_fixed.remote("base"))
    collector = Collector(
        engines={}, tokenizers={}, buffer=buffer, league=league, recorder=recorder, scheduler=None,
        params=None,
    )  # fmt: skip
    return collector, buffer, league


def test_a_failed_game_of_a_group_reaches_the_buffer_and_cuts_its_group(ray_session, tmp_path):
    """A failed game is never trained on, but the buffer must hear of it: its group can never be whole, and
    would otherwise wait (and hold its games) until they went stale."""
    from unstable_core.types import Step, Trajectory

    collector, buffer, league = recording_collector(tmp_path, StepBuffer)

    def grouped(idx: int, failed: bool) -> GameResult:
        result = game(idx)
        result.info.group_id, result.info.group_size, result.info.failed = "g0", 2, failed
        step = Step(pid=0, env_id="E", obs="o", act="a", game_idx=idx, group_id="g0", prompt_ids=[1])
        result.trajectories = [
            Trajectory(pid=0, env_id="E", model_uid="ckpt-0", steps=[step], collect_data=True)
        ]
        return result

    asyncio.run(collector._record(grouped(0, failed=False), "train"))
    asyncio.run(collector._record(grouped(1, failed=True), "train"))
    stats = ray.get(buffer.stats.remote())
    assert stats["groups_incomplete"] == 1 and stats["steps_incomplete"] == 1 and stats["groups_pending"] == 0


class PickyBuffer(StepBuffer):
    """A StepBuffer that refuses game 1 (as a raising reward transform would)."""

    def add_result(self, result):
        if result.info.game_idx == 1:
            raise ValueError("game 1 is refused")
        return super().add_result(result)


def test_games_recorded_in_one_pass_take_one_call_per_actor_and_fail_alone(ray_session, tmp_path):
    """Before: each finished game made its own recorder, league and buffer calls, a few hundred microseconds
    of the collector's CPU each (a quarter of its event loop at 2,000 turns/s)."""
    collector, buffer, league = recording_collector(tmp_path, PickyBuffer)

    async def three_games_in_one_pass():
        return await asyncio.gather(
            *(collector._record(game(i), "train") for i in range(3)), return_exceptions=True
        )

    first, refused, last = asyncio.run(three_games_in_one_pass())
    assert (first.info.game_idx, last.info.game_idx) == (0, 2)
    assert isinstance(refused, ValueError) and str(refused) == "game 1 is refused"
    batches = (collector._recorded, collector._rated, collector._buffered)
    assert [(b.calls, b.items) for b in batches] == [(1, 3), (1, 3), (1, 3)]
    assert [g["info"]["game_idx"] for g in read_jsonl(tmp_path / "games" / "games.jsonl")] == [0, 1, 2]
    assert ray.get(league.to_dict.remote())["env_games"]["E"] == 3
    assert ray.get(buffer.stats.remote())["games"] == 2


def test_an_actor_killed_for_memory_is_named_with_the_figures_and_what_to_lower():
    """Ray's OutOfMemoryError (not a RayTaskError) reaches the run as one line, not a traceback."""
    import ray.exceptions

    from unstable_core.runtime.recovery.liveness import ActorDied, oom_reason

    exc = ray.exceptions.OutOfMemoryError(
        "2 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 192.0.2.2, "
        "ID: 64cd) was 22.37GB used / 23.54GB limit (0.950324)\nOOM kill reason: Memory usage ..."
    )
    died = ActorDied("the learner", oom_reason(exc))
    assert died.what == (
        "actor died (killed by Ray: the machine ran out of memory, 22.37GB of 23.54GB used; lower "
        "--mini-batch-size or --num-train-workers, or stop other work on the machine)"
    )
    assert "ran out of memory;" in oom_reason(ray.exceptions.OutOfMemoryError("no figures"))
