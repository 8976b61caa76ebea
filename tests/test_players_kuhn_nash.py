"""Kuhn Poker's `optimal` player: a Nash equilibrium, alpha drawn per game, read from the real env."""

import pytest

from unstable_core.envs.catalogue import make_env
from unstable_core.games.players.catalogue import make_player
from unstable_core.games.players.kuhn_nash import NASH, aggressive_probability, history

pyspiel = pytest.importorskip("pyspiel")


def tabular(alpha: float):
    from open_spiel.python import policy

    table = policy.TabularPolicy(pyspiel.load_game("kuhn_poker"))
    for key, row in table.state_lookup.items():
        bet = aggressive_probability(int(key[0]), key[1:], alpha)
        table.action_probability_array[row] = [1 - bet, bet]
    return table


@pytest.mark.parametrize("alpha", [0.0, 0.1, 1 / 3])
def test_every_alpha_of_the_table_is_an_equilibrium(alpha):
    from open_spiel.python.algorithms import exploitability

    assert exploitability.exploitability(pyspiel.load_game("kuhn_poker"), tabular(alpha)) == pytest.approx(
        0, abs=1e-9
    )
    assert set(NASH) == {"", "p", "b", "pb"}


def test_the_history_is_read_from_the_mover_and_the_legal_moves():
    env = make_env("KuhnPoker-v0-chips")
    env.reset(num_players=2, seed=5)
    seen = [history(env)]
    env.step("[check]")
    seen.append(history(env))
    env.step("[bet]")
    seen.append(history(env))
    env = make_env("KuhnPoker-v0-chips")
    env.reset(num_players=2, seed=5)
    env.step("[bet]")
    assert seen + [history(env)] == ["", "p", "pb", "b"]


def test_the_player_mixes_as_the_equilibrium_over_games():
    """J facing a bet always folds, K always calls; Q facing a bet calls a third of the time."""
    calls = {0: 0, 1: 0, 2: 0}
    for seed in range(600):
        env = make_env("KuhnPoker-v0-chips")
        env.reset(num_players=2, seed=seed)
        env.step("[bet]")  # the starting player bets; the other faces it
        card = env.state.game_state["player_cards"][env.state.current_player_id]
        move = make_player("optimal", "KuhnPoker-v0-chips", seed, env.state.current_player_id).move(env, "")
        calls[card] += move == "[call]"
    dealt = {c: sum(1 for s in range(600) if _card_facing(s) == c) for c in calls}
    assert calls[0] == 0 and calls[2] == dealt[2]
    assert abs(calls[1] / dealt[1] - 1 / 3) < 0.08


def _card_facing(seed: int) -> int:
    env = make_env("KuhnPoker-v0-chips")
    env.reset(num_players=2, seed=seed)
    return env.state.game_state["player_cards"][1 - env.state.current_player_id]
