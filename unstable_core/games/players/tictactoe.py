"""TicTacToe's scripted players: `optimal` (perfect play by minimax) and `heuristic` (take a win, else block
the opponent's, else any legal cell), both reading the board from the real env's state.

Cells are numbered 0-8 row by row, as TextArena numbers them; seat 0 plays `O`, seat 1 `X`. Minimax
scores a position for the mover: a win as 1 + the cells still empty after it (a quicker win is worth
more, a later loss costs less), a draw 0. So `optimal` takes an immediate win when there is one, and blocks
a threat it cannot beat. Ties (several moves of the best score, several wins, several blocks) are broken by
the player's own `random.Random`, seeded from the game's seed and the seat (`catalogue.seat_seed`), so that
a model playing it many times cannot memorise one line.
"""

from __future__ import annotations

import functools
import random
from typing import Any

from unstable_core.games.players.base import ScriptedPlayer

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
MARKS = {0: "O", 1: "X"}  # TextArena's seat -> its mark

Board = tuple[str, ...]  # 9 cells: "", "O" or "X"


def board_of(env: Any) -> Board:
    """The env's board as 9 cells, row by row."""
    return tuple(cell for row in env.state.game_state["board"] for cell in row)


def mover_mark(env: Any) -> str:
    """The mark of the seat to move."""
    return MARKS[env.state.current_player_id]


def other(mark: str) -> str:
    return "X" if mark == "O" else "O"


def empty_cells(board: Board) -> list[int]:
    return [i for i, cell in enumerate(board) if not cell]


def winning_cells(board: Board, mark: str) -> list[int]:
    """The empty cells that complete a line of `mark`."""
    cells = set()
    for line in LINES:
        marks = [board[i] for i in line]
        if marks.count(mark) == 2 and marks.count("") == 1:
            cells.add(line[marks.index("")])
    return sorted(cells)


def has_line(board: Board, mark: str) -> bool:
    return any(all(board[i] == mark for i in line) for line in LINES)


@functools.cache
def score(board: Board, mark: str) -> int:
    """The minimax value of `board` for `mark` to move: 1 + empty cells left after a forced win, minus that
    for a forced loss, 0 for a draw."""
    best = None
    for cell in empty_cells(board):
        value = move_score(board, mark, cell)
        best = value if best is None else max(best, value)
    return 0 if best is None else best


def move_score(board: Board, mark: str, cell: int) -> int:
    """The minimax value for `mark` of playing `cell`."""
    after = board[:cell] + (mark,) + board[cell + 1 :]
    left = len(empty_cells(after))
    if has_line(after, mark):
        return 1 + left
    if not left:
        return 0
    return -score(after, other(mark))


def optimal_cells(board: Board, mark: str) -> list[int]:
    """The empty cells of the best minimax value for `mark`."""
    values = {cell: move_score(board, mark, cell) for cell in empty_cells(board)}
    best = max(values.values())
    return [cell for cell, value in values.items() if value == best]


def heuristic_cells(board: Board, mark: str) -> list[int]:
    """The cells that win now; else those that block the opponent's win; else every empty cell."""
    return winning_cells(board, mark) or winning_cells(board, other(mark)) or empty_cells(board)


class _TicTacToePlayer(ScriptedPlayer):
    """A TicTacToe player that picks one of `cells(board, mark)` with its own seeded `random.Random`."""

    def __init__(self, env_id: str, seed: int) -> None:
        self.env_id = env_id
        self.rng = random.Random(seed)

    @staticmethod
    def cells(board: Board, mark: str) -> list[int]:
        raise NotImplementedError

    def move(self, env: Any, observation: str) -> str:
        board = board_of(env)
        return f"[{self.rng.choice(self.cells(board, mover_mark(env)))}]"


class OptimalPlayer(_TicTacToePlayer):
    """Perfect play: a cell of the best minimax value (quickest win, latest loss), ties broken at random."""

    cells = staticmethod(optimal_cells)


class HeuristicPlayer(_TicTacToePlayer):
    """Take a win, else block the opponent's win, else a random legal cell."""

    cells = staticmethod(heuristic_cells)
