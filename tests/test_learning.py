"""The learning test: every installed learner masters the letter game (success <= 0.3 -> >= 0.9) in a
bounded number of updates, through the real backend, game loop, buffer, transforms and checkpoints; a
learner whose loss has the wrong sign does not (the test can fail)."""

import pytest

from unstable_core.learning_check import GOAL, START_MAX, check_learner_learns, sign_flipped
from unstable_core.plugins import get_registry

LEARNERS = get_registry().names("learner")


def test_every_shipped_learner_is_installed():
    assert {"reinforce", "a2c", "ppo"} <= set(LEARNERS)


@pytest.mark.parametrize("name", LEARNERS)
def test_learner_learns_the_letter_game(name, tmp_path):
    result = check_learner_learns(get_registry().load("learner", name), tmp_path)
    print(result.summary())
    assert result.start <= START_MAX, result.summary()
    assert result.updates_to_goal is not None and max(result.rates[1:]) >= GOAL, result.summary()
    assert result.passed


def test_a_learner_with_its_loss_sign_flipped_fails(tmp_path):
    result = check_learner_learns(sign_flipped(get_registry().load("learner", "reinforce")), tmp_path)
    print(result.summary())
    assert not result.passed
    assert max(result.rates) < GOAL and result.rates[-1] < 0.1  # it learns to avoid the winning letter


@pytest.mark.parametrize("learner", ["reinforce", "ppo"])
def test_group_relative_advantages_learn_with_each_seed_played_g_times(learner, tmp_path):
    """GRPO's recipe: each seed played G = 8 times, each step's reward centred on its group's mean."""
    group_relative = get_registry().load("reward_transform", "group-relative")
    result = check_learner_learns(
        get_registry().load("learner", learner),
        tmp_path,
        sampling_transforms=[group_relative(by="seed")],
        seed_repeat=8,
    )
    print(result.summary())
    assert result.passed, result.summary()


def test_group_relative_gives_no_signal_when_every_seed_is_played_once(tmp_path):
    """Groups of one have no baseline: every advantage is 0 and nothing is learned (why `repeat` exists)."""
    group_relative = get_registry().load("reward_transform", "group-relative")
    result = check_learner_learns(
        get_registry().load("learner", "reinforce"),
        tmp_path,
        sampling_transforms=[group_relative(by="seed")],
        max_updates=5,
    )
    print(result.summary())
    assert not result.passed and max(result.rates) < GOAL
