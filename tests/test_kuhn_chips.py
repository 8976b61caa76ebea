"""Kuhn Poker in chips (envs/kuhn.py): a bet puts a chip in the pot; the final reward is net chips."""

from unstable_core.envs.catalogue import make_env
from unstable_core.games.env_ops import set_error_allowance


def play(env_id: str, seed: int, moves: list[str]) -> tuple[dict, list[str]]:
    env = make_env(env_id)
    env.reset(num_players=2, seed=seed)
    set_error_allowance(env, 0)  # as a run plays it: the first invalid move loses
    observations = []
    for move in moves:
        _, observation = env.get_observation()
        observations.append(observation)
        done, _ = env.step(move)
    assert done
    rewards, _ = env.close()
    return rewards, observations


def test_textarenas_kuhn_poker_never_puts_a_bet_in_the_pot():
    """Why the chips variant exists: a called bet wins TextArena's game by the antes alone."""
    import textarena as ta

    env = ta.make("KuhnPoker-v0-short-train")
    env.reset(num_players=2, seed=5)
    env.step("[bet]")
    env.step("[call]")
    chips = env.state.game_state["player_chips"]  # after round 2's antes
    assert chips[1] - chips[0] == 2  # the antes alone: in Kuhn Poker the winner of a called bet gains 2


def test_a_called_bet_wins_two_chips_and_a_fold_one():
    # seed 5 deals Q to player 1, who acts first, and J to player 0
    assert play("KuhnPoker-v0-chips", 5, ["[bet]", "[call]"])[0] == {0: -2.0, 1: 2.0}
    assert play("KuhnPoker-v0-chips", 5, ["[bet]", "[fold]"])[0] == {0: -1.0, 1: 1.0}
    assert play("KuhnPoker-v0-chips", 5, ["[check]", "[check]"])[0] == {0: -1.0, 1: 1.0}


def test_an_invalid_move_keeps_textarenas_loss():
    assert play("KuhnPoker-v0-chips", 5, ["[raise]"])[0] == {0: 1, 1: -1}


def test_five_rounds_sum_their_chips():
    rewards, _ = play("KuhnPoker-v0-short-chips", 3, ["[check]", "[check]"] * 5)
    assert rewards[0] == -rewards[1] and abs(rewards[0]) <= 5 and rewards[0] % 1 == 0


def test_the_observation_is_textarenas_train_variant_for_one_round():
    import textarena as ta

    ours = play("KuhnPoker-v0-chips", 5, ["[bet]", "[call]"])[1]
    theirs = ta.make("KuhnPoker-v0-short-train")
    theirs.reset(num_players=2, seed=5)
    _, first = theirs.get_observation()
    assert ours[0] == first.replace("5 round", "1 round").replace("for 5 rounds", "for 1 rounds").replace(
        "out of 5 rounds", "out of 1 rounds"
    )
