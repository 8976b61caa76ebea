"""Admission control: training games start only while their steps can be trained on within max_staleness;
the learner waits for a straggler instead of letting it go stale; nothing is dropped that was admitted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from unstable_core.io import read_jsonl
from unstable_core.runtime.actors.admission import Admission
from unstable_core.runtime.actors.buffer import StepBuffer
from unstable_core.runtime.recovery.resume import is_learner_record
from unstable_core.testing import TINY_RUN_ARGS
from unstable_core.types import GameInformation, GameResult, Step, Trajectory


def game(idx: int, steps: int, version: int) -> GameResult:
    """A finished mirror game of `steps` training steps, all of policy `version`."""
    trajs = [
        Trajectory(
            pid=pid,
            env_id="E",
            model_uid="m",
            collect_data=True,
            steps=[
                Step(
                    pid=pid,
                    env_id="E",
                    obs="o",
                    act="a",
                    turn=2 * t + pid,
                    game_idx=idx,
                    policy_version=version,
                )
                for t in range(steps // 2)
            ],
        )  # fmt: skip
        for pid in (0, 1)
    ]
    info = GameInformation(game_idx=idx, env_id="E", final_rewards={0: 1.0, 1: -1.0}, learner_pids=[0, 1])
    return GameResult(info=info, trajectories=trajs)


def test_the_budget_is_the_steps_the_learner_takes_before_data_goes_stale():
    a = Admission(batch_size=8, max_staleness=1, capacity=100)
    assert a.budget == 16 and a.expected_steps == 16  # before any game finished: one game alone
    (first,) = a.admit(10, held=0, version=0)
    a.release(first, 4)
    assert len(a.admit(10, held=0, version=0)) == 4  # 4 games x 4 expected steps
    assert a.admit(1, held=0, version=0) == []  # full
    assert Admission(batch_size=8, max_staleness=3, capacity=20).budget == 20  # never beyond the buffer


def test_once_the_update_has_taken_its_batch_the_current_version_has_a_batch_less_ahead():
    a = Admission(batch_size=8, max_staleness=1, capacity=100, mean_steps=4)
    a.batch_served()
    assert a.budget == 8 and len(a.admit(5, held=0, version=0)) == 2
    a.batch_served()  # a version whose data is served by no later update: nothing to admit for it
    assert a.budget == 0 and a.admit(1, held=8, version=0) == []
    a.version_published()
    assert a.budget == 16


def test_what_a_game_produced_teaches_the_estimate_and_frees_its_booking():
    a = Admission(batch_size=8, max_staleness=1, capacity=100)
    a.release(a.admit(1, held=0, version=0)[0], 4)
    first, second = a.admit(2, held=0, version=0)
    a.release(first, 10)
    assert a.expected_steps == 4 + 0.2 * (10 - 4) and a.booked() == 4  # the second's booking is as it was
    a.smoothing = 1.0  # the last game alone, for round numbers below
    a.release(a.admit(1, held=0, version=0)[0], 10)
    a.release(second, None)  # failed: frees its booking, teaches nothing
    assert a.expected_steps == 10 and a.booked() == 0 and a.in_flight == 0
    a.release(12345, 3)  # a ticket it does not know (a game admitted before a restart): ignored
    assert a.expected_steps == 10
    assert len(a.admit(5, held=0, version=1)) == 1  # 10 + 10 > 16
    assert len(a.admit(1, held=0, version=1)) == 0


def test_games_longer_than_the_budget_are_still_played_one_at_a_time_while_the_learner_lacks_a_batch():
    a = Admission(batch_size=8, max_staleness=1, capacity=100)
    a.release(a.admit(1, 0, 0)[0], 40)  # budget 16
    assert len(a.admit(3, held=0, version=0)) == 1 and a.admit(1, held=0, version=0) == []
    a = Admission(batch_size=8, max_staleness=1, capacity=100, mean_steps=40)
    assert len(a.admit(3, held=5, version=0)) == 1  # less than a batch held, nothing in flight
    a = Admission(batch_size=8, max_staleness=1, capacity=100, mean_steps=40)
    assert a.admit(1, held=20, version=0) == []  # a batch is ready: the learner goes first


def test_the_learner_waits_for_a_game_that_the_next_update_would_make_stale():
    a = Admission(batch_size=4, max_staleness=1, capacity=100)
    (old,) = a.admit(1, held=0, version=3)
    assert not a.blocks_batch(3)  # the update to version 4 keeps version 3 fresh
    assert a.blocks_batch(4)  # the update to version 5 would not: wait for it
    a.release(old, 6)
    assert not a.blocks_batch(4)


def test_a_budget_buffer_holds_the_batch_for_a_straggler_and_serves_the_oldest_data_first():
    buf = StepBuffer(100, max_staleness=1, admission="budget", batch_size=4)
    buf.admission.release(buf.admit(1)[0], 2)  # budget 8 steps; games of 2 steps expected from here
    (old,) = buf.admit(1)
    buf.set_policy_version(1)
    newer, newest = buf.admit(2)
    buf.add_result(game(1, 4, version=1))
    buf.release(newer, 4)
    assert buf.get_batch(4) is None  # the game of version 0 would go stale at the update to 2: wait
    buf.add_result(game(0, 4, version=0))  # it arrives after a newer one
    buf.release(old, 4)
    assert [s.policy_version for s in buf.get_batch(4)] == [0, 0, 0, 0]  # the oldest first
    buf.set_policy_version(2)
    assert buf.get_batch(4) is None  # the game admitted at version 1 is still being played
    buf.release(newest, None)  # it failed
    assert [s.policy_version for s in buf.get_batch(4)] == [1, 1, 1, 1]
    stats = buf.stats()
    assert stats["steps_stale"] == 0 and stats["updates_waiting_for_stragglers"] == 2
    assert stats["games_admitted"] == 4 and stats["steps_generated"] == 8


def test_a_version_that_produced_more_than_a_batch_is_trained_on_whole_instead_of_dropped():
    """Games longer than the estimate: version 0 produced 6 steps for a batch of 4. The batch at version 1
    takes all 6 (the update to 2 would make the last two stale); the loss is their mean (tests/test_learner_base.py)."""
    buf = StepBuffer(100, max_staleness=1, admission="budget", batch_size=4)
    buf.add_result(game(0, 6, version=0))
    buf.add_result(game(1, 4, version=1))
    buf.set_policy_version(1)
    assert [s.policy_version for s in buf.get_batch(4)] == [0] * 6 + [1] * 0
    buf.set_policy_version(2)
    assert buf.stats()["steps_stale"] == 0 and buf.size() == 4
    buf.add_result(game(2, 10, version=2))  # the next update keeps version 2: a batch, the rest waits
    assert [s.policy_version for s in buf.get_batch(4)] == [1, 1, 1, 1]
    buf.set_policy_version(3)
    assert len(buf.get_batch(4)) == 10  # every step of version 2 was at risk: all of them
    buf.set_policy_version(4)
    assert buf.stats()["steps_stale"] == 0 and buf.stats()["steps_evicted"] == 0
    dropping = StepBuffer(100, max_staleness=1, batch_size=4)
    dropping.add_result(game(0, 6, version=0))
    dropping.set_policy_version(1)
    assert len(dropping.get_batch(4)) == 4  # the dropping policy serves exactly a batch
    dropping.set_policy_version(2)
    assert dropping.stats()["steps_stale"] == 2


def test_the_drop_policy_admits_while_the_buffer_has_room():
    buf = StepBuffer(4, max_staleness=1)
    assert buf.admit(3) == [None, None, None]
    buf.add_result(game(0, 4, version=0))
    assert buf.admit(3) == []  # full
    buf.stop()
    assert StepBuffer(4, admission="drop").admit(1) == [None] and buf.admit(1) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"admission": "budget", "max_staleness": 1},  # no batch size
        {"admission": "budget", "batch_size": 4},  # no staleness bound
        {"admission": "later", "batch_size": 4, "max_staleness": 1},
    ],
)
def test_a_budget_needs_the_batch_size_and_the_staleness_bound(kwargs):
    with pytest.raises(ValueError):
        StepBuffer(8, **kwargs)


PIPELINE = Path(__file__).parents[1] / "benchmarks" / "pipeline.py"


@pytest.mark.slow
def test_under_admission_control_a_slow_learner_loses_no_step_where_dropping_loses_most(tmp_path):
    """benchmarks/pipeline.py --quick (both policies on the tiny model, 4 updates) with a learner that
    sleeps 3 s after every update (the fault point `update-*`) and 16 games in flight: generation outruns
    it. Dropping loses most of what it played, the budget nothing; the benchmark's figures are the runs'
    own. One pair of runs serves the admission check and the benchmark's smoke test."""
    env = {
        **os.environ,
        "UNSTABLE_TEST_PAUSE_AT": f"update-*:{tmp_path / 'marker'}",
        "UNSTABLE_TEST_PAUSE_S": "3",
    }
    out = tmp_path / "pipeline.json"
    cmd = [sys.executable, str(PIPELINE), "--seeds", "1", "--quick", "--out", str(out),
           "--", "--num-train-workers", "16"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    runs = {r["policy"]: r for r in data["runs"]}
    assert set(runs) == {"drop", "budget"} and all(r["updates"] == 4 for r in runs.values())
    drop, budget = runs["drop"], runs["budget"]
    assert drop["steps_stale"] + drop["steps_evicted"] > 0.5 * drop["steps_generated"]
    assert budget["steps_stale"] == 0 and budget["steps_evicted"] == 0 and budget["steps_used"] > 0
    assert budget["steps_used"] / budget["steps_generated"] > drop["steps_used"] / drop["steps_generated"]
    assert 0 < budget["learner_busy"] <= 1 and 0 <= budget["inference_busy"] <= 1
    assert data["ratio_per_seed"]["0"] > 0 and "budget / drop wall time" in proc.stdout
    assert data["budget_max_lost_share"] == 0 and "most steps a budget run lost: 0.0%" in proc.stdout


def grouped(idx: int, group: str, size: int, steps: int, version: int) -> GameResult:
    """A game of `steps` training steps, all of policy `version`, one of the `size` games of `group`."""
    result = game(idx, steps, version)
    result.info.group_id, result.info.group_size = group, size
    for t in result.trajectories:
        for s in t.steps:
            s.group_id = group
    return result


def test_a_group_longer_than_the_budget_is_admitted_whole_and_trained_on():
    """The issue's deadlock: groups of 8 games of 8 steps, batch 4, max_staleness 1 (a budget of 8 steps).
    Before, the admission granted 1, then 3, then 0 games forever (the group's first games counted as
    held) while the buffer served only whole groups: no batch ever."""
    buf = StepBuffer(8, max_staleness=1, admission="budget", batch_size=4)
    first = buf.admit(4, group_size=8)  # before any game ended: one group at a time, whole
    assert len(first) == 4 and buf.admission.booked() == 8 * 8  # its 4 games beyond the 4 asked for: booked
    for t in first:
        buf.release(t, 8)
    for i in range(4):
        buf.add_result(grouped(i, "g0", 8, 8, version=0))
    assert buf.get_batch(4) is None  # a group is served whole only
    assert buf.admit(4, group_size=8, continuing=0) == []  # no new group while this one is unfinished
    rest = buf.admit(4, group_size=8, continuing=4)  # the group's other games: whatever the budget
    assert len(rest) == 4
    for i, t in enumerate(rest, start=4):
        buf.add_result(grouped(i, "g0", 8, 8, version=0))
        buf.release(t, 8)
    batch = buf.get_batch(4)
    assert len(batch) == 64 and {s.game_idx for s in batch} == set(range(8))
    assert len(buf.admit(8, group_size=8)) == 8  # nothing held, nothing booked: the next group, whole
    assert buf.stats()["steps_stale"] == buf.stats()["steps_evicted"] == 0


def test_a_group_in_progress_holds_back_the_update_that_would_make_it_stale():
    buf = StepBuffer(100, max_staleness=1, admission="budget", batch_size=4)
    buf.admission.release(buf.admission.admit(1, 0, 0)[0], 1)  # games of 1 step expected from here
    a, b = buf.admit(2, group_size=4)  # a group of 4 at version 0, its last 2 reserved
    assert buf.admission.booked() == 4 and not buf.admission.blocks_batch(0)
    assert buf.admission.blocks_batch(1)  # the update to 2 would make version 0 stale: wait for the group
    late = buf.admit(2, group_size=4, continuing=2)
    assert buf.admission._tickets[late[0]].version == 0  # the group's version, not the current one


def test_a_group_whose_games_all_ended_before_the_learner_moved_is_empty_not_a_crash():
    """A non-mirror game where the opponent moves first and loses by an invalid move: no learner step."""
    for admission in ("budget", "drop"):
        buf = StepBuffer(100, max_staleness=1, admission=admission, batch_size=4)
        for i in range(2):
            assert buf.add_result(grouped(i, "g0", 2, 0, version=0)) == 0
        stats = buf.stats()
        assert stats["groups_empty"] == 1 and stats["groups_pending"] == 0 and buf.size() == 0


def test_at_max_staleness_0_nothing_is_admitted_while_the_update_runs():
    """A game admitted during the update would be played by the old version and stale on arrival."""
    buf = StepBuffer(100, max_staleness=0, admission="budget", batch_size=4)
    (t,) = buf.admit(4)
    buf.add_result(game(0, 6, version=0))
    buf.release(t, 6)
    assert len(buf.get_batch(4)) == 6  # all of version 0: the next version makes it stale
    assert buf.admit(4) == []  # starved, but the update runs: nothing until it publishes
    buf.set_policy_version(1)
    assert len(buf.admit(4)) == 1
    assert buf.stats()["steps_stale"] == 0


def run_tiny(model: str, tmp_path, *args: str) -> list[dict]:
    """`unstable run` on the tiny model with TINY_RUN_ARGS and `args`; its learner records."""
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "unstable_core", "run", "--model", model, "--runs-dir", str(runs),
           "--run-name", "r", *TINY_RUN_ARGS, *args]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [m for m in read_jsonl(runs / "r" / "metrics.jsonl") if is_learner_record(m)]


def test_a_run_with_groups_longer_than_the_budget_finishes(tiny_model, tmp_path):
    """The issue's reproduction: groups of 8 games, up to 7 retried invalid moves each, batch 4. It sat
    at step 0 until killed: the admission's budget let part of a group start, never the rest."""
    records = run_tiny(tiny_model, tmp_path, "--learning-steps", "2", "--env-sampler", "adaptive",
                       "--env-sampler-config", '{"repeat": 8}', "--sampling-transform", "group-relative",
                       "--error-allowance", "6")  # fmt: skip
    assert [m["step"] for m in records] == [1, 2]  # the second group is admitted once the first is served
    last = records[-1]
    assert last["learner/buffer/steps_stale"] == 0 and last["learner/buffer/steps_evicted"] == 0
    assert last["learner/buffer/groups_served"] >= 2


def test_a_run_whose_learner_never_moves_in_a_whole_group_goes_on(tiny_model, tmp_path):
    """The base opponent (the tiny model) answers out of format on its first turn: in a group where the
    learner sits second, no game reaches its turn. The empty group crashed the buffer."""
    records = run_tiny(tiny_model, tmp_path, "--learning-steps", "4", "--env-sampler-config", '{"repeat": 2}',
                       "--sampler", "fixed", "--fixed-opponent", "base")  # fmt: skip
    assert [m["step"] for m in records] == [1, 2, 3, 4]
    assert records[-1]["learner/buffer/groups_empty"] >= 1
