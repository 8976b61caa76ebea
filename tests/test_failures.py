"""Failures surface: distinct game errors and the verdict that stops a run, reward transforms that raise or
return NaN, non-finite learner updates, and run files that stay valid JSON."""

import json
import math

import pytest

from unstable_core.errors import UnstableError
from unstable_core.io import dumps_json, json_line, read_jsonl
from unstable_core.rewards import FinalRewardTransform, StepRewardTransform
from unstable_core.runtime.actors.buffer import StepBuffer
from unstable_core.runtime.actors.recorder import ErrorLines, Recorder
from unstable_core.runtime.recovery.failures import FailureMonitor, NonFiniteUpdates, error_key
from unstable_core.trackers.jsonl import JSONLTracker
from unstable_core.types import GameInformation, GameResult, Step, Trajectory, to_dict


def strict_loads(text: str):
    def refuse(constant):
        raise ValueError(f"bare {constant} in JSON")

    return json.loads(text, parse_constant=refuse)


def test_every_one_of_the_first_games_failing_stops_with_the_error():
    m = FailureMonitor(window=4)
    for i in range(3):
        m.add(True, f"env 'X' exploded at turn {i}", game_idx=i)
        assert m.verdict() is None
    m.add(True, "env 'X' exploded at turn 9", game_idx=3)
    assert m.verdict().startswith("every one of the first 4 games failed (4 of 4 in all)")
    assert "(4x): env 'X' exploded at turn 0" in m.verdict()
    assert [e["count"] for e in m.snapshot()["errors"]] == [4]  # numbers aside, one error


def test_more_than_half_of_the_last_games_failing_stops_a_run_that_started_well():
    m = FailureMonitor(window=4, max_rate=0.5)
    for ok in (True, True, True, True, False, True, False):  # 2 of the last 4 failed: not more than half
        m.add(not ok, None if ok else "timeout after 5 s")
    assert m.verdict() is None
    m.add(True, "timeout after 7 s")
    assert m.verdict().startswith("3 of the last 4 games failed")
    m.add(False)  # a later success does not take the verdict back
    assert m.verdict() is not None


def test_error_keys_ignore_numbers_and_distinct_errors_are_capped():
    assert error_key("game 12 timed out after 3.5 s") == error_key("game 7 timed out after 10 s")
    m = FailureMonitor(window=1000)
    for i in range(80):
        m.add(True, f"error kind {'abcdefghijklmnopqrstuvwxyz'[i % 26]}{'xyz'[i // 26 % 3]}")
    assert len(m.snapshot()["errors"]) <= 51 and sum(e["count"] for e in m.snapshot()["errors"]) == 80


def test_each_distinct_error_of_a_recorder_snapshot_is_shown_once_with_its_first_game():
    """What a run's wait and an evaluation's play both show (they had a copy each)."""
    m = FailureMonitor(window=10)
    m.add(True, "env 'X' exploded at turn 1", game_idx=3, kind="train")
    lines: list[str] = []
    show = ErrorLines(lines.append)
    show.show({"failures": m.snapshot()})
    m.add(True, "env 'X' exploded at turn 2", game_idx=5)  # the same error: counted, not shown again
    m.add(True, "timeout", game_idx=6, kind="eval")
    show.show({"failures": m.snapshot()})
    show.show({})  # a snapshot without failures
    assert lines == ["train game 3 failed: env 'X' exploded at turn 1", "eval game 6 failed: timeout"]
    ErrorLines(None).show({"failures": m.snapshot()})  # no one to tell: nothing happens


class _NaNFinal(FinalRewardTransform):
    def __call__(self, rewards, env_id=None):
        return {pid: float("nan") for pid in rewards}


class _Raising(StepRewardTransform):
    def __call__(self, trajectory, step_index, reward):
        raise KeyError("no such seat")


def _game() -> GameResult:
    step = Step(pid=0, env_id="E", obs="", act="a", prompt_ids=[1], completion_ids=[2])
    info = GameInformation(
        game_idx=0, env_id="E", seed=0, eval=False, models={0: "ckpt-0"}, learner_pids=[0],
        final_rewards={0: 1.0}, failed=False,
    )  # fmt: skip
    return GameResult(
        info=info,
        trajectories=[Trajectory(pid=0, env_id="E", model_uid="ckpt-0", steps=[step], collect_data=True)],
    )


def test_a_final_transform_returning_nan_stops_the_data_with_its_name():
    """Before: the NaN went into the batch, every update was skipped, the run reported success."""
    with pytest.raises(UnstableError, match=r"final reward transform _NaNFinal returned nan for seat 0"):
        StepBuffer(8, [_NaNFinal()]).add_result(_game())


def test_a_transform_that_raises_is_one_line_naming_it():
    with pytest.raises(
        UnstableError, match=r"^step reward transform _Raising raised KeyError: 'no such seat'$"
    ):
        StepBuffer(8, [], [_Raising()]).add_result(_game())


def test_json_files_hold_null_for_nan_and_count_it(tmp_path):
    """Before: metrics.jsonl got a bare NaN (invalid JSON)."""
    assert strict_loads(dumps_json({"a": float("nan"), "b": [1.0, float("inf")], "c": 2})) == {
        "a": None, "b": [1.0, None], "c": 2,
    }  # fmt: skip
    tracker = Recorder(tmp_path, [JSONLTracker(tmp_path, "r")])
    tracker.log_learner({"loss": float("nan"), "grad_norm": float("inf"), "lr": 1e-3}, step=1)
    tracker.log_learner({"loss": 0.5}, step=2)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    first, second = (strict_loads(line) for line in lines)
    assert first["learner/loss"] is None and first["learner/grad_norm"] is None
    assert first["counts/nonfinite_values"] == 2 and second["counts/nonfinite_values"] == 2
    assert read_jsonl(tmp_path / "metrics.jsonl")[1]["learner/loss"] == 0.5


def test_non_finite_updates_of_a_real_learner_stop_after_k_in_a_row(tiny_model, tmp_path):
    """A NaN reward makes REINFORCE's loss NaN and its update a no-op; the third in a row stops the run."""
    from unstable_reinforce.learner import REINFORCELearner

    lrn = REINFORCELearner.create(tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4})
    lrn.initialize_algorithm()
    step = Step(pid=0, env_id="t", obs="", act="", prompt_ids=[1, 2, 3], completion_ids=[40, 41])
    guard = NonFiniteUpdates(limit=3)
    good = dict(lrn.update([attrs_evolve(step, reward=1.0)]))
    assert not guard.observe(good) and good["nonfinite_updates"] == 0
    stops = []
    for _ in range(3):
        metrics = dict(lrn.update([attrs_evolve(step, reward=float("nan"))]))
        assert metrics["skipped_nonfinite"] == 1.0 and not math.isfinite(metrics["loss"])
        stops.append(guard.observe(metrics))
    assert stops == [False, False, True] and metrics["nonfinite_updates"] == 3
    assert "3 learner updates in a row had a non-finite loss" in guard.message(metrics)
    assert not NonFiniteUpdates(3).observe(dict(lrn.update([attrs_evolve(step, reward=0.5)])))


def attrs_evolve(step, **changes):
    import attrs

    return attrs.evolve(step, **changes)


def test_a_non_finite_number_in_a_game_is_null_in_games_jsonl_and_counted(tmp_path):
    game = _game()
    game.info.duration_s = float("inf")
    tracker = Recorder(tmp_path, [JSONLTracker(tmp_path, "r")])
    tracker.add_game(game)
    line = (tmp_path / "games" / "games.jsonl").read_text().splitlines()[0]
    assert strict_loads(line)["info"]["duration_s"] is None
    tracker.log_learner({"loss": 0.5}, step=1)
    assert read_jsonl(tmp_path / "metrics.jsonl")[0]["counts/nonfinite_values"] == 1


def test_a_games_json_line_is_its_attrs_asdict_and_a_nan_anywhere_is_null():
    """The encoder now reads the attrs instances itself (a game's thousands of token ids are no longer
    walked in Python): the line must stay what `attrs.asdict` gave, and a NaN deep inside still null."""
    game = _game()
    game.trajectories[0].steps[0].step_info = {"env": {"scores": (1.0, 2)}, "ids": (3, 4)}
    assert json.loads(json_line(game)[0]) == json.loads(json.dumps(to_dict(game))) and json_line(game)[1] == 0
    game.trajectories[0].steps[0].step_info["env"]["scores"] = (float("nan"), 2)
    line, nonfinite = json_line(game)
    assert strict_loads(line)["trajectories"][0]["steps"][0]["step_info"]["env"]["scores"] == [None, 2]
    assert nonfinite == 1


def test_eval_json_writes_null_for_a_rate_that_is_not_a_number(tiny_model, tmp_path, monkeypatch):
    """Before: json.dumps(allow_nan=False) raised a ValueError traceback where summary.json held null."""
    from click.testing import CliRunner

    import unstable_core.eval.play as play
    import unstable_core.report.evaluation as report
    from unstable_core.cli.main import cli

    class Stats:  # a pair whose rate is not a number (e.g. no game it could be computed on)
        games, errors, failed = 1, [], 0

        def to_dict(self):
            return {"games": 1, "win_rate": float("nan")}

    monkeypatch.setattr(play, "play_games", lambda *args, **kwargs: [])
    monkeypatch.setattr(report, "aggregate", lambda planned, results: [Stats()])
    args = [
        "eval",
        tiny_model,
        "--opponent",
        "random",
        "--games",
        "1",
        "--json",
        "--out",
        str(tmp_path / "e"),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    summary = strict_loads(result.stdout)
    assert summary["results"] == [{"games": 1, "win_rate": None}]
