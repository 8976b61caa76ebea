"""The built-in `optimal` player, one name for the games that have one: TicTacToe's minimax player
(`tictactoe.OptimalPlayer`) and Kuhn Poker's equilibrium player (`kuhn_nash.KuhnNashPlayer`)."""

from __future__ import annotations

from unstable_core.games.coverage import game_of
from unstable_core.games.players.base import ScriptedPlayer

OPTIMAL_GAMES = ["TicTacToe", "KuhnPoker"]  # what `optimal` is registered for


def optimal(env_id: str, seed: int) -> ScriptedPlayer:
    """The `optimal` player of `env_id`'s game."""
    if game_of(env_id) == "KuhnPoker":
        from unstable_core.games.players.kuhn_nash import KuhnNashPlayer

        return KuhnNashPlayer(env_id, seed)
    from unstable_core.games.players.tictactoe import OptimalPlayer

    return OptimalPlayer(env_id, seed)
