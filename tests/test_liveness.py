"""Nothing lost and never a hang when an actor dies: games reach games.jsonl as they are recorded, stop()
flushes each actor on its own, and the run's liveness checks name the actor that died or did not answer
(real Ray actors)."""

import json

import pytest
import ray

from unstable_core.config import RunConfig
from unstable_core.io import read_jsonl
from unstable_core.runtime.registry_host import RegistryHost
from unstable_core.runtime.run import Run, _TrackerActor
from unstable_core.runtime.tracker import Tracker
from unstable_core.types import GameInformation, GameResult


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="unstable-liveness")
    yield
    ray.shutdown()


def game(idx: int) -> GameResult:
    info = GameInformation(
        game_idx=idx, env_id="E", seed=idx, eval=False, models={0: "ckpt-0", 1: "base"}, learner_pids=[0],
        final_rewards={0: 1.0, 1: -1.0}, failed=False, num_turns=3,
    )  # fmt: skip
    return GameResult(info=info)


def test_each_game_reaches_games_jsonl_when_it_is_recorded(tmp_path):
    """Before: up to 64 games (2 s) waited in the tracker's memory, lost when it died."""
    tracker = Tracker(tmp_path)
    tracker.add_game(game(0))
    tracker.add_game(game(1))
    assert [g["info"]["game_idx"] for g in read_jsonl(tmp_path / "games" / "games.jsonl")] == [0, 1]


def test_a_killed_tracker_loses_no_recorded_game(ray_session, tmp_path):
    tracker = ray.remote(_TrackerActor).options(num_cpus=0).remote(str(tmp_path), [])
    for i in range(3):
        tracker.add_game.remote(game(i))
    assert ray.get(tracker.snapshot.remote())["counts"]["train_games"] == 3
    ray.kill(tracker, no_restart=True)
    assert len(read_jsonl(tmp_path / "games" / "games.jsonl")) == 3


def started_run(tiny_model: str, tmp_path) -> Run:
    """A Run with a real tracker and registry (rated once, not yet saved) and nothing else started."""
    cfg = RunConfig(model_name=tiny_model, runs_dir=str(tmp_path), run_name="r", trackers=[])
    run = Run(cfg, learn=False)
    remote = lambda cls: ray.remote(cls).options(num_cpus=0)  # noqa: E731
    run.actors["tracker"] = remote(_TrackerActor).remote(str(run.run_dir), [])
    registry = remote(RegistryHost).remote(str(run.run_dir / "registry.json"), save_every_s=3600)
    run.actors["registry"] = registry
    ray.get(registry.add_checkpoint.remote("ckpt-0", None, 0, inherit=False))
    ray.get(registry.add_fixed.remote("base"))
    # rated in memory only: save_every_s keeps it off the disk until a flush
    ray.get(registry.update_ratings.remote(["ckpt-0", "base"], [1.0, -1.0], "E"))
    ray.get(run.actors["tracker"].add_game.remote(game(0)))
    return run


def test_stop_flushes_the_registry_when_the_tracker_is_dead(ray_session, tiny_model, tmp_path):
    """Before: the tracker's dead snapshot raised first, so the registry's last ratings never reached disk."""
    run = started_run(tiny_model, tmp_path)
    ray.kill(run.actors["tracker"], no_restart=True)
    summary = run.stop()
    saved = {m["uid"]: m for m in json.loads((run.run_dir / "registry.json").read_text())["models"]}
    assert saved["ckpt-0"]["games"] == 1 and saved["ckpt-0"]["wins"] == 1
    assert summary["registry"]["current"] == "ckpt-0"
    assert any(e.startswith("tracker.close: ") for e in summary["stop_errors"])


def test_stop_closes_the_tracker_when_the_registry_is_dead(ray_session, tiny_model, tmp_path):
    run = started_run(tiny_model, tmp_path)
    ray.kill(run.actors["registry"], no_restart=True)
    summary = run.stop()
    assert summary["counts"]["train_games"] == 1  # the tracker still answered
    assert len(read_jsonl(run.run_dir / "games" / "games.jsonl")) == 1
    assert "registry" not in summary and any(e.startswith("registry.flush: ") for e in summary["stop_errors"])
