"""The learning check's strategy games by hand: outcomes, lengths, invalid moves, and what a constant policy
gets (the card game must not be passable without reading the card)."""

import pytest

from unstable_core.testing.learning_check import GOAL
from unstable_core.testing.learning_games import CARDS, HighOrLowEnv, WinOrStallEnv, dealt_card


def play(env, answers, seed=0):
    env.reset(num_players=1, seed=seed)
    turns = 0
    for answer in answers:
        pid, obs = env.get_observation()
        turns += 1
        done, _ = env.step(answer)
        if done:
            break
    rewards, info = env.close()
    return rewards, turns, env


def test_the_stall_game_is_won_only_at_once_and_lost_after_stalling():
    rewards, turns, _ = play(WinOrStallEnv(), ["[C]"])
    assert rewards == {0: 1.0} and turns == 1
    rewards, turns, env = play(WinOrStallEnv(), ["A", "C", "C", "C", "C"])  # C after the first turn: too late
    assert rewards == {0: -1.0} and turns == 4 and not env.state.game_info[0]["invalid_move"]
    _, obs = WinOrStallEnv().get_observation()
    assert obs.endswith("Round: first")


def test_the_card_game_pays_the_true_claim_and_a_constant_claim_wins_half():
    env = HighOrLowEnv()
    seeds = range(400)
    cards = [dealt_card(s) for s in seeds]
    assert set(cards) == set(CARDS) and 0.4 < cards.count("king") / len(cards) < 0.6
    for constant in ("A", "B"):
        wins = 0
        for seed in seeds:
            env.reset(num_players=2, seed=seed)
            assert env.get_observation()[1].endswith(f"Your card: {dealt_card(seed)}")
            assert env.step(constant) == (False, {})
            assert env.get_observation()[0] == 1  # the fixed opponent calls
            assert env.step("[call]")[0]
            wins += env.close()[0][0] == 1.0
        assert wins / len(seeds) < GOAL - 0.3  # a constant policy is far from passing
    env.reset(num_players=2, seed=1)
    assert env.step("Z")[0] and env.close()[0] == {0: -1.0, 1: 1.0}
    assert env.state.game_info[0]["invalid_move"]


def test_the_stall_game_rejects_more_turns_than_it_has_round_words():
    with pytest.raises(ValueError, match="max_turns"):
        WinOrStallEnv(max_turns=5)
