"""Scripted players a game ships: opponents played by code, in runs and evaluations, wherever `random` is
one; registered through `register_players`.

- `base`: `ScriptedPlayer`, what each of them is; `catalogue`: the registered ones by name.
- `legal_moves`: the per-game readers of a position's legal moves; `random_move`: the `random` player.
- `tictactoe`: TicTacToe's `optimal` (minimax) and `heuristic`; `kuhn_nash`: Kuhn Poker's equilibrium
  player; `optimal`: the one name `optimal` for both.
"""

from unstable_core.games.players.base import ScriptedPlayer

__all__ = ["ScriptedPlayer"]
