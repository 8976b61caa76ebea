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

    from unstable_core.model_registry import ModelRegistry
    from unstable_core.runtime.scheduler import GameScheduler

    registry = ModelRegistry()
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
