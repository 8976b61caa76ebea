"""The buffers: reward stages in order, eviction beyond size, staleness, episodes kept whole."""

from unstable_core.rewards import FinalRewardTransform, SamplingRewardTransform, StepRewardTransform
from unstable_core.runtime.actors.buffer import EpisodeBuffer, StepBuffer
from unstable_core.types import GameInformation, GameResult, Step, Trajectory


def game(
    idx: int, rewards: dict[int, float], turns: int = 2, version: int = 0, learners=(0, 1), failed=False
) -> GameResult:
    trajs = []
    for pid in rewards:
        steps = [
            Step(
                pid=pid,
                env_id="E",
                obs="o",
                act="a",
                turn=2 * t + pid,
                game_idx=idx,
                policy_version=version,
                format_ok=t % 2 == 0,
            )
            for t in range(turns)
        ]
        trajs.append(
            Trajectory(pid=pid, env_id="E", model_uid="m", steps=steps, collect_data=pid in learners)
        )
    info = GameInformation(
        game_idx=idx, env_id="E", final_rewards=dict(rewards), learner_pids=list(learners), failed=failed
    )
    return GameResult(info=info, trajectories=trajs)


class Double(FinalRewardTransform):
    def __call__(self, rewards, env_id=None):
        return {p: 2 * r for p, r in rewards.items()}


class FormatBonus(StepRewardTransform):
    def __call__(self, trajectory, step_index, reward):
        return reward + (0.5 if trajectory.steps[step_index].format_ok else -0.5)


class AddTen(SamplingRewardTransform):
    def __call__(self, steps):
        for s in steps:
            s.reward += 10
        return steps


def test_reward_stages_apply_in_order():
    buf = StepBuffer(100, [Double()], [FormatBonus()], [AddTen()])
    assert buf.add_result(game(0, {0: 1.0, 1: -1.0})) == 4
    batch = buf.get_batch(4)
    by_pid = {(s.pid, s.turn): (s.final_reward, s.reward) for s in batch}
    # final: 2 x outcome; step: +0.5 formatted (t=0), -0.5 not (t=1); sampling: +10
    assert by_pid == {(0, 0): (2.0, 12.5), (0, 2): (2.0, 11.5), (1, 1): (-2.0, 8.5), (1, 3): (-2.0, 7.5)}


def test_only_learner_seats_failed_and_eval_games_skipped():
    buf = StepBuffer(100)
    assert buf.add_result(game(0, {0: 1.0, 1: -1.0}, learners=(1,))) == 2
    assert buf.add_result(game(1, {0: 1.0, 1: -1.0}, failed=True)) == 0
    ev = game(2, {0: 1.0, 1: -1.0})
    ev.info.eval = True
    assert buf.add_result(ev) == 0
    assert buf.size() == 2 and {s.pid for s in buf.get_batch(2)} == {1}


def test_evicts_oldest_beyond_max_size_and_pauses_collection_when_full():
    buf = StepBuffer(6)
    for i in range(3):
        buf.add_result(game(i, {0: 0.0, 1: 0.0}))  # 4 steps each
    assert buf.size() == 6
    assert buf.counts["steps_evicted"] == 6
    assert min(s.game_idx for s in buf.get_batch(6)) == 1  # game 0 evicted first
    assert buf.continue_collection()
    buf.add_result(game(3, {0: 0.0, 1: 0.0}))
    buf.add_result(game(4, {0: 0.0, 1: 0.0}))
    assert not buf.continue_collection()
    buf.stop()
    assert buf.stopped


def test_get_batch_waits_for_enough_steps():
    buf = StepBuffer(100)
    buf.add_result(game(0, {0: 1.0, 1: 0.0}))
    assert buf.get_batch(5) is None
    assert len(buf.get_batch(3)) == 3 and buf.size() == 1


def test_stale_steps_are_dropped():
    buf = StepBuffer(100, max_staleness=1)
    buf.add_result(game(0, {0: 1.0, 1: 0.0}, version=0))
    buf.add_result(game(1, {0: 1.0, 1: 0.0}, version=1))
    assert buf.set_policy_version(2) == 4
    assert {s.game_idx for s in buf.get_batch(4)} == {1}


def test_episode_buffer_serves_whole_trajectories_in_turn_order():
    buf = EpisodeBuffer(100)
    buf.add_result(game(0, {0: 1.0, 1: -1.0}, turns=3))
    batch = buf.get_batch(4)  # 2 trajectories of 3 steps: both whole
    assert len(batch) == 6
    assert [s.turn for s in batch if s.pid == 0] == [0, 2, 4]
    assert buf.size() == 0


def test_tracker_counts_outcomes_and_moving_means(tmp_path):
    from unstable_core.runtime.actors.recorder import Recorder, outcome_label

    assert outcome_label({0: 1.0, 1: -1.0}) == "seat0_win"
    assert outcome_label({0: -1.0, 1: 1.0, 2: 1.0}) == "seat1_win"
    assert outcome_label({0: 0.0, 1: 0.0}) == "draw"
    t = Recorder(tmp_path)
    t.add_game(game(0, {0: 1.0, 1: -1.0}))
    t.add_game(game(1, {0: 0.0, 1: 0.0}))
    t.add_game(game(2, {0: 0.0, 1: 0.0}, failed=True))
    t.close()
    assert t.counts == {"train_games": 3, "train_seat0_win": 1, "train_draw": 1, "train_failed": 1}
    # every step of game() alternates format_ok True/False: a moving mean of 0.5 over the two finished games
    assert t.means()["train/E/format_rate"] == 0.5
    assert len((tmp_path / "games" / "games.jsonl").read_text().splitlines()) == 3


def test_stale_games_added_after_a_version_moved_are_never_served():
    """A game started by version 0 that finishes after version 5 was published is dropped on arrival."""
    for cls in (StepBuffer, EpisodeBuffer):
        buf = cls(100, max_staleness=1)
        buf.set_policy_version(5)
        assert buf.add_result(game(0, {0: 1.0, 1: -1.0}, version=0)) == 0
        assert buf.add_result(game(1, {0: 1.0, 1: -1.0}, version=4)) == 4
        batch = buf.get_batch(4)
        assert {s.policy_version for s in batch} == {4}
        assert buf.stats()["steps_stale_on_add"] == 4
        assert buf.stats()["steps_stale"] == 4


def test_staleness_is_checked_again_when_a_batch_is_served():
    buf = StepBuffer(100, max_staleness=1)
    buf.add_result(game(0, {0: 1.0, 1: -1.0}, version=0))
    buf.policy_version = 3  # a version moved without a publish call reaching the buffer yet
    assert buf.get_batch(4) is None
    assert buf.stats()["steps_stale_on_serve"] == 4
    assert buf.size() == 0


def test_no_staleness_bound_keeps_everything():
    buf = StepBuffer(100, max_staleness=None)
    buf.set_policy_version(9)
    assert buf.add_result(game(0, {0: 1.0, 1: -1.0}, version=0)) == 4
    assert len(buf.get_batch(4)) == 4


def test_final_transforms_see_only_the_collected_seats():
    """With a fixed opponent at seat 1, a per-seat baseline must not track the opponent's results."""
    seen = []

    class Record(FinalRewardTransform):
        def __call__(self, rewards, env_id=None):
            seen.append(dict(rewards))
            return rewards

    buf = StepBuffer(100, [Record()])
    buf.add_result(game(0, {0: 1.0, 1: -1.0}, learners=(0,)))
    assert seen == [{0: 1.0}]


def test_shaping_is_recorded_per_step_and_untouched_by_sampling_transforms():
    buf = EpisodeBuffer(100, [Double()], [FormatBonus()], [AddTen()])
    buf.add_result(game(0, {0: 1.0, 1: -1.0}))
    batch = buf.get_batch(4)
    by_turn = {(s.pid, s.turn): (s.final_reward, s.shaping, s.reward) for s in batch}
    assert by_turn == {
        (0, 0): (2.0, 0.5, 12.5),
        (0, 2): (2.0, -0.5, 11.5),
        (1, 1): (-2.0, 0.5, 8.5),
        (1, 3): (-2.0, -0.5, 7.5),
    }


def test_a_stale_game_never_reaches_the_final_transforms():
    """A game dropped as stale on arrival must not move a baseline (e.g. role-advantage's EMA)."""
    seen = []

    class Record(FinalRewardTransform):
        def __call__(self, rewards, env_id=None):
            seen.append(dict(rewards))
            return rewards

    for cls in (StepBuffer, EpisodeBuffer):
        seen.clear()
        buf = cls(100, [Record()], max_staleness=1)
        buf.set_policy_version(5)
        assert buf.add_result(game(0, {0: 1.0, 1: -1.0}, version=3)) == 0
        assert seen == [] and buf.counts["steps_stale_on_add"] == 4 and buf.counts["games"] == 1
        assert buf.add_result(game(1, {0: 1.0, 1: -1.0}, version=4)) == 4
        assert seen == [{0: 1.0, 1: -1.0}]


def grouped(idx: int, group: str, size: int, outcome: float, turns: int = 3, version: int = 0, failed=False):
    """A one-seat game of group `group` (of `size` games)."""
    result = game(idx, {0: outcome}, turns=turns, version=version, learners=(0,), failed=failed)
    result.info.group_id, result.info.group_size = group, size
    for s in result.trajectories[0].steps:
        s.group_id = group
    return result


def test_a_group_is_held_until_whole_then_served_whole():
    """4 games of 3 steps served with batch size 10: the batch is the whole group (12 steps), never 10 steps
    of it (before: groups cut at 10, the 4th game's last steps judged in the next batch, alone)."""
    group_relative = __import__("unstable_rewards").GroupRelative
    buf = StepBuffer(100, sampling_transforms=[group_relative()])
    outcomes = [1.0, -1.0, -1.0, 1.0]
    for i, outcome in enumerate(outcomes[:3]):
        assert buf.add_result(grouped(i, "g0", 4, outcome)) == 0  # waiting for the group's last game
    assert buf.size() == 0 and buf.get_batch(1) is None and buf.stats()["groups_pending"] == 1
    assert buf.add_result(grouped(3, "g0", 4, outcomes[3])) == 12
    batch = buf.get_batch(10)
    assert len(batch) == 12 and buf.size() == 0 and buf.counts["groups_served"] == 1
    assert {s.game_idx: s.reward for s in batch} == {0: 1.0, 1: -1.0, 2: -1.0, 3: 1.0}  # group mean 0


def test_a_group_with_a_failed_or_stale_game_is_dropped_and_counted():
    buf = StepBuffer(100, max_staleness=1)
    buf.add_result(grouped(0, "g0", 3, 1.0))
    buf.add_result(grouped(1, "g0", 3, 0.0, failed=True))  # can never be whole
    assert buf.add_result(grouped(2, "g0", 3, -1.0)) == 0  # its last game is dropped as it arrives
    assert buf.size() == 0 and buf.counts["groups_incomplete"] == 1 and buf.counts["steps_incomplete"] == 6
    assert buf.stats()["groups_pending"] == 0 and not buf._pending  # nothing kept for the cut group
    buf.add_result(grouped(3, "g1", 2, 1.0, version=0))
    assert buf.set_policy_version(2) == 3  # its held game is too old now: the group is cut
    assert buf.add_result(grouped(4, "g1", 2, 1.0, version=0)) == 0
    assert buf.counts["groups_incomplete"] == 2 and not buf._pending


def test_whole_groups_are_evicted_and_dropped_as_stale_as_units_and_counted():
    buf = StepBuffer(8, max_staleness=1)
    for group, first in (("g0", 0), ("g1", 2)):
        for idx in (first, first + 1):
            buf.add_result(grouped(idx, group, 2, 1.0, turns=2))
    assert buf.size() == 8 and buf.counts["groups_dropped"] == 0
    buf.add_result(grouped(4, "g2", 2, 1.0, turns=2, version=1))
    buf.add_result(grouped(5, "g2", 2, 1.0, turns=2, version=1))
    assert buf.counts["groups_dropped"] == 1 and buf.counts["steps_evicted"] == 4  # g0 evicted whole
    assert buf.set_policy_version(2) == 4 and buf.counts["groups_dropped"] == 2  # g1 (version 0) whole
    assert [s.game_idx for s in buf.get_batch(1)] == [4, 4, 5, 5]  # g2 whole, served as one


def test_the_episode_buffer_serves_whole_groups_of_whole_trajectories():
    buf = EpisodeBuffer(100)
    buf.add_result(grouped(0, "g", 2, 1.0, turns=2))
    buf.add_result(grouped(1, "g", 2, -1.0, turns=3))
    batch = buf.get_batch(1)
    assert [(s.game_idx, s.turn) for s in batch] == [(0, 0), (0, 2), (1, 0), (1, 2), (1, 4)]
