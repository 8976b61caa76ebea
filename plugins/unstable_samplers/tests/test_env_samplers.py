"""Env samplers: uniform and adaptive probabilities by hand, seeded draws, learner outcomes, errors."""

import math
from collections import Counter

import pytest
from unstable_samplers.env import AdaptiveEnvSampler, UniformRandomEnvSampler, learner_outcome

from unstable_core.errors import UnstableError
from unstable_core.types import EvalEnvSpec, GameInformation, TrainEnvSpec

TRAIN = [TrainEnvSpec("A-v0"), TrainEnvSpec("B-v0"), TrainEnvSpec("C-v0", num_players=3, num_actors=1)]
EVAL = [EvalEnvSpec("A-v0", fixed_opponent="base"), EvalEnvSpec("D-v0")]


def game(env_id, rewards, learner_pids=(0,), eval=False, failed=False):
    return GameInformation(
        game_idx=0,
        env_id=env_id,
        eval=eval,
        failed=failed,
        learner_pids=list(learner_pids),
        final_rewards=dict(enumerate(rewards)),
    )


def frequencies(draws):
    counts = Counter(draws)
    return {k: v / len(draws) for k, v in counts.items()}


def test_uniform_probabilities_and_seeded_draws():
    sampler = UniformRandomEnvSampler(TRAIN, EVAL, seed=7)
    assert sampler.probabilities() == [1 / 3, 1 / 3, 1 / 3]
    freq = frequencies([sampler.sample("train").env_id for _ in range(3000)])
    for env in ("A-v0", "B-v0", "C-v0"):
        assert freq[env] == pytest.approx(1 / 3, abs=0.04)
    again = UniformRandomEnvSampler(TRAIN, EVAL, seed=7)
    first = UniformRandomEnvSampler(TRAIN, EVAL, seed=7)
    assert [again.sample().env_id for _ in range(50)] == [first.sample().env_id for _ in range(50)]
    other = UniformRandomEnvSampler(TRAIN, EVAL, seed=8)
    assert [other.sample().env_id for _ in range(50)] != [first.sample().env_id for _ in range(50)]


def test_uniform_eval_draws_only_eval_specs():
    sampler = UniformRandomEnvSampler(TRAIN, EVAL, seed=0)
    draws = [sampler.sample("eval") for _ in range(400)]
    assert all(isinstance(d, EvalEnvSpec) for d in draws)
    assert frequencies([d.env_id for d in draws])["D-v0"] == pytest.approx(0.5, abs=0.08)


def test_env_sampler_errors():
    with pytest.raises(UnstableError, match="no evaluation environment; add one with --eval-env"):
        UniformRandomEnvSampler(TRAIN).sample("eval")
    with pytest.raises(UnstableError, match="'train' or 'eval', got 'test'"):
        UniformRandomEnvSampler(TRAIN).sample("test")
    with pytest.raises(UnstableError, match="at least one training environment"):
        UniformRandomEnvSampler([])
    with pytest.raises(UnstableError, match="unknown option.*windw"):
        AdaptiveEnvSampler(TRAIN, windw=5)
    with pytest.raises(UnstableError, match="window"):
        AdaptiveEnvSampler(TRAIN, window=0)
    with pytest.raises(UnstableError, match="temperature"):
        AdaptiveEnvSampler(TRAIN, temperature=0.0)


@pytest.mark.parametrize(
    ("rewards", "learners", "expected"),
    [
        ([1.0, -1.0], [0], 1.0),
        ([-1.0, 1.0], [0], 0.0),
        ([0.0, 0.0], [0], 0.5),
        ([1.0, -1.0], [0, 1], 0.5),  # mirror self-play: one copy wins, the other loses
        ([1.0, 1.0, 0.0], [0], 0.5),  # tied with the best other seat
        ([0.5, 1.0, 0.0], [2, 1], 0.5),  # seat 1 wins (1), seat 2 loses (0)
        ([1.0], [0], 1.0),  # alone: compared with 0
        ([0.0], [0], 0.5),
        ([-1.0], [0], 0.0),
        ([1.0, -1.0], [], None),
        ([1.0], [3], None),
    ],
)
def test_learner_outcome(rewards, learners, expected):
    assert learner_outcome(game("A-v0", rewards, learners)) == expected


def test_adaptive_probabilities_follow_recent_win_rates():
    sampler = AdaptiveEnvSampler(TRAIN, seed=0, window=4, temperature=0.2)
    assert sampler.probabilities() == pytest.approx([1 / 3] * 3)  # nothing seen: all at p = 0.5
    for rewards in ([-1, 1], [1, -1], [1, -1], [1, -1], [0, 0]):  # window 4 keeps the last four of A
        sampler.update(game("A-v0", rewards))
    for rewards in ([-1, 1, 1], [-1, 0, 1]):
        sampler.update(game("C-v0", rewards))
    sampler.update(game("B-v0", [1, -1], eval=True))  # eval and failed games teach nothing
    sampler.update(game("B-v0", [1, -1], failed=True))
    assert sampler.win_rate("A-v0") == pytest.approx((1 + 1 + 1 + 0.5) / 4)
    assert sampler.win_rate("B-v0") == 0.5
    assert sampler.win_rate("C-v0") == 0.0
    w_a, w_b, w_c = math.exp(-0.375 / 0.2), 1.0, math.exp(-0.5 / 0.2)
    total = w_a + w_b + w_c
    expected = [w_a / total, w_b / total, w_c / total]
    assert sampler.probabilities() == pytest.approx(expected, rel=1e-12)
    freq = frequencies([sampler.sample("train").env_id for _ in range(4000)])
    for env, p in zip(("A-v0", "B-v0", "C-v0"), expected, strict=True):
        assert freq.get(env, 0.0) == pytest.approx(p, abs=0.03)


def test_adaptive_state_round_trip_keeps_the_window():
    sampler = AdaptiveEnvSampler(TRAIN, window=2)
    for rewards in ([1, -1], [1, -1], [-1, 1]):
        sampler.update(game("A-v0", rewards))
    state = sampler.state_dict()
    assert state == {"window": 2, "outcomes": {"A-v0": [1.0, 0.0]}}
    restored = AdaptiveEnvSampler(TRAIN, window=2)
    restored.load_state_dict(state)
    assert restored.probabilities() == sampler.probabilities()
    restored.update(game("A-v0", [-1, 1]))
    assert restored.win_rate("A-v0") == 0.0
    with pytest.raises(UnstableError, match="not a saved sampler state"):
        restored.load_state_dict({"outcomes": ["x"]})


@pytest.mark.parametrize("cls", [UniformRandomEnvSampler, AdaptiveEnvSampler])
def test_repeat_plays_each_seed_and_seating_g_times_in_a_row(cls):
    """With repeat=3 the scheduler's games come in runs of 3 with the same env, seed and seats (GRPO groups)."""
    from unstable_samplers.model import MirrorModelSampler

    from unstable_core.league.league import League
    from unstable_core.runtime.actors.scheduler import GameScheduler

    registry = League()
    registry.add_checkpoint("ckpt-0", None, 0, inherit=False)
    two = [
        TrainEnvSpec("A-v0", num_players=2, num_actors=1),
        TrainEnvSpec("B-v0", num_players=2, num_actors=1),
    ]
    scheduler = GameScheduler(cls(two, seed=1, repeat=3), MirrorModelSampler(seed=1), seed=5)
    games = [scheduler.next_train(registry) for _ in range(12)]
    keys = [(g.env_id, g.seed, tuple(p.collect_data for p in g.players)) for g in games]
    groups = [keys[i : i + 3] for i in range(0, 12, 3)]
    assert all(len(set(group)) == 1 for group in groups)  # one env, seed and seating per group
    assert len({group[0][1] for group in groups}) == 4  # a fresh seed for every group
    assert [g.game_idx for g in games] == list(range(12))  # game indices stay unique

    plain = GameScheduler(cls(two, seed=1), MirrorModelSampler(seed=1), seed=5)
    seeds = [plain.next_train(registry).seed for _ in range(6)]
    assert len(set(seeds)) == 6 and seeds[0] == keys[0][1]  # repeat=1: every game its own seed, as before


@pytest.mark.parametrize("repeat", [0, -2, 1.5, True, "3"])
def test_repeat_must_be_a_positive_integer(repeat):
    with pytest.raises(UnstableError, match="repeat must be an integer >= 1"):
        UniformRandomEnvSampler(TRAIN, repeat=repeat)


def _lagged_registry(checkpoints: int):
    from unstable_core.league.league import League

    registry = League()
    for i in range(checkpoints):
        registry.add_checkpoint(f"ckpt-{i}", None, i, inherit=False)
    return registry


def _key(g):
    """Everything a game is but its game index: env, seed, and who sits where (and whether it learns)."""
    return g.env_id, g.seed, tuple((p.pid, p.model_uid, p.collect_data) for p in g.players)


@pytest.mark.parametrize("cls", [UniformRandomEnvSampler, AdaptiveEnvSampler])
def test_a_group_replays_its_opponents(cls):
    """Lagged self-play over 4 checkpoints, 3 opponents per game: every game of a group has the same
    opponents at the same seats; the groups themselves draw different ones."""
    from unstable_samplers.model import AsynchronousModelSampler

    from unstable_core.runtime.actors.scheduler import GameScheduler

    registry = _lagged_registry(4)
    four = [TrainEnvSpec("A-v0", num_players=4, num_actors=1)]
    scheduler = GameScheduler(cls(four, seed=1, repeat=4), AsynchronousModelSampler(seed=2, k=4), seed=5)
    keys = [_key(scheduler.next_train(registry)) for _ in range(24)]
    groups = [keys[i : i + 4] for i in range(0, 24, 4)]
    assert all(len(set(group)) == 1 for group in groups)
    assert len({tuple(uid for _, uid, _ in group[0][2]) for group in groups}) > 1  # opponents vary by group


def test_a_group_plays_one_checkpoint_even_when_a_new_one_is_published_during_it():
    """A group's games differ only in what the policy samples: the learner's seats and a CURRENT opponent
    (self-play) keep the checkpoint of the group's first game when a new one is published meanwhile (before,
    the group's last games were played by the next version: a group of two policies); the next group plays
    the new one."""
    from unstable_samplers.model import MirrorModelSampler

    from unstable_core.runtime.actors.scheduler import GameScheduler

    registry = _lagged_registry(1)
    two = [TrainEnvSpec("A-v0", num_players=2, num_actors=1)]
    scheduler = GameScheduler(UniformRandomEnvSampler(two, repeat=3), MirrorModelSampler(), seed=5)
    first = scheduler.next_train(registry)
    registry.add_checkpoint("ckpt-1", None, 1)
    second, third = scheduler.next_train(registry), scheduler.next_train(registry)
    assert {p.model_uid for p in first.players + second.players + third.players} == {"ckpt-0"}
    assert first.seed == second.seed == third.seed
    assert first.group_id == second.group_id == third.group_id == f"g{first.game_idx}"
    assert first.group_size == 3
    fourth = scheduler.next_train(registry)
    assert {p.model_uid for p in fourth.players} == {"ckpt-1"} and fourth.group_id == f"g{fourth.game_idx}"


@pytest.mark.parametrize("cls", [UniformRandomEnvSampler, AdaptiveEnvSampler])
def test_a_restored_scheduler_finishes_the_group_in_progress(cls):
    """Saved after 2 games of a group of 4 (through JSON), a fresh scheduler plays the group's last 2 games
    as the first would have, then goes on identically."""
    import json

    from unstable_samplers.model import AsynchronousModelSampler

    from unstable_core.runtime.actors.scheduler import GameScheduler

    registry = _lagged_registry(4)
    envs = [
        TrainEnvSpec("A-v0", num_players=3, num_actors=1),
        TrainEnvSpec("B-v0", num_players=3, num_actors=1),
    ]

    def scheduler(index_base=0):
        sampler = cls(envs, seed=1, repeat=4)
        return GameScheduler(sampler, AsynchronousModelSampler(seed=2, k=4), seed=5, index_base=index_base)

    first = scheduler()
    played = [_key(first.next_train(registry)) for _ in range(6)]  # a group of 4, then 2 of the next
    state = json.loads(json.dumps(first.state_dict()))
    assert state["env_sampler"]["state"]["group"]["left"] == 2
    second = scheduler(index_base=6)  # a resumed run numbers its games after those recorded
    second.load_state_dict(state)
    ahead = [_key(first.next_train(registry)) for _ in range(10)]
    again = [_key(second.next_train(registry)) for _ in range(10)]
    assert again == ahead and again[:2] == played[4:6]  # the group is finished, not cut short
    assert len(set(played[4:6] + ahead[:2])) == 1


def test_repeat_one_keeps_no_group_state_and_a_bad_group_is_refused():
    assert UniformRandomEnvSampler(TRAIN).state_dict() == {}
    sampler = UniformRandomEnvSampler(TRAIN, repeat=2)
    with pytest.raises(UnstableError, match="not a saved sampler state"):
        sampler.load_state_dict({"group": {"env": 7, "left": 1, "seed": 3, "opponents": None}})
    sampler.load_state_dict({})  # a state saved before groups were kept: a new group starts
    assert sampler._left == 0
