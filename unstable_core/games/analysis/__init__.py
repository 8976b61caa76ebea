"""Exact yardsticks and scripted players a game ships, registered through `register_game_analyses`.

- Scripted players (`kind="player"`): opponents played by code, wherever `random` is one. Built in:
  `random` (`games.random_player`), TicTacToe's `optimal` and `heuristic` (`tictactoe`).

Importing this package stays light (no torch).
"""

from __future__ import annotations

from unstable_core.games.random_player import ScriptedPlayer

__all__ = ["ScriptedPlayer"]
