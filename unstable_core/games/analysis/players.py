"""The built-in `optimal` player, one name for the games that have one: TicTacToe's minimax player
(`tictactoe.OptimalPlayer`) and Kuhn Poker's equilibrium player (`kuhn_players.KuhnNashPlayer`)."""

from __future__ import annotations

from unstable_core.games.random_player import ScriptedPlayer

OPTIMAL_GAMES = ["TicTacToe", "KuhnPoker"]


def optimal(env_id: str, seed: int) -> ScriptedPlayer:
    """The `optimal` player of `env_id`'s game."""
    from unstable_core.games.analysis.catalogue import game_of

    if game_of(env_id) == "KuhnPoker":
        from unstable_core.games.analysis.kuhn_players import KuhnNashPlayer

        return KuhnNashPlayer(env_id, seed)
    from unstable_core.games.analysis.tictactoe import OptimalPlayer

    return OptimalPlayer(env_id, seed)
