"""The legal moves of a game's position, read per game: what the `random` player picks from, and the legal
answers a learner may score (`games.legal_answers`).

Legal moves come from the env's state where it holds them (TicTacToe's board, Kuhn Poker's action tree,
Othello's valid moves, Chess's python-chess board), else from the last list of moves in the observation
("Available Moves: [0], [1]"), else from a game's fixed move set (Rock-Paper-Scissors). "Legal" is what the
env accepts: a Snake that moves into a wall loses, but its move was legal.

Surveyed on TextArena 0.7.4's two-player `-train` envs (see LEGAL_MOVES for the supported ones). Refused:
- the moves are neither listed nor kept in the state, and enumerating them means re-implementing the
  game's rules: Alquerque, Battleship, Breakthrough, Checkers, Chopsticks, GermanWhist (follow suit),
  Golf ([swap X Y]), LinesOfAction, MemoryGame, QuantumTicTacToe, Tak, UltimateTicTacToe;
- a move carries a free amount or free text: ColonelBlotto, IndianPoker and Poker ([bet X]), LiarsDice,
  IteratedTwoThirdsAverage, IteratedUltimatumGame, SimpleBlindAuction, and the conversation games
  (IteratedPrisonersDilemma, IteratedStagHunt, MarketEntryGame, PublicGoodsGame, SimpleNegotiation,
  NewRecruit, TwoDollar, TruthAndDeception);
- listed but unreliable: SantoriniBaseFixed (its "Valid moves" line is not the mover's after the first
  turn, so listed moves are refused), Stratego (its env raises mid-game and random games run past 2000
  turns), SpiteAndMalice (random games do not finish).
Games for one player or for three and more, and those that need a download (nltk data) or an API key
to start, are not two-player games here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

LegalMoves = Callable[[Any, str], list[str]]


def _state(env: Any) -> Any:
    return env.state.game_state


def _tictactoe(env: Any, observation: str) -> list[str]:
    """An empty cell of the 3x3 board (TicTacToe, ReverseTicTacToe)."""
    board = _state(env)["board"]
    return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if not board[r][c]]


def _kuhn_poker(env: Any, observation: str) -> list[str]:
    return [f"[{k}]" for k in _state(env)["current_legal_action_tree"]]


def _connect_four(env: Any, observation: str) -> list[str]:
    """A column whose top cell is empty."""
    top = _state(env)["board"][0]
    return [f"[col {c}]" for c, cell in enumerate(top) if cell == "."]


def _nim(env: Any, observation: str) -> list[str]:
    """Any positive number of objects from one non-empty pile."""
    return [f"[{i} {q}]" for i, n in enumerate(_state(env)["piles"]) for q in range(1, n + 1)]


def _othello(env: Any, observation: str) -> list[str]:
    """The env's own list of the mover's valid moves (kept in its state whether or not the variant shows it);
    with none, any answer passes the turn."""
    return [f"[{r}, {c}]" for r, c in _state(env)["valid_moves"]] or ["[pass]"]


def _chess(env: Any, observation: str) -> list[str]:
    """python-chess's legal moves of the env's board, in UCI (every variant keeps the board in its state)."""
    return [f"[{move.uci()}]" for move in _state(env)["board"].legal_moves]


def _briscola(env: Any, observation: str) -> list[str]:
    """Any card of the mover's hand (Briscola has no duty to follow suit), by its position from 1."""
    hand = _state(env)["players"][env.state.current_player_id]["hand"]
    return [f"[play {i}]" for i in range(1, len(hand) + 1)]


def _fixed(*moves: str) -> LegalMoves:
    """Games whose every turn takes one of the same few moves."""
    return lambda env, observation: list(moves)


def _listed_after(marker: str) -> LegalMoves:
    """Moves as the `[...]` items on the line after the last `marker` in the observation."""
    pattern = re.compile(re.escape(marker) + r"([^\n]*)", re.IGNORECASE)

    def moves(env: Any, observation: str) -> list[str]:
        found = pattern.findall(observation)
        return re.findall(r"\[[^\[\]]+\]", found[-1]) if found else []

    return moves


# TextArena game (the env id up to "-v") -> where its legal moves come from; every variant of a game
# (e.g. KuhnPoker-v0-long-train, Othello-v0-hard-train, Chess-v0-blind-train) is covered: where a variant
# hides the moves from the players, they are read from the env's state. Each entry is checked by playing
# random against random to the end (tests/test_players_random.py). Surveyed on TextArena 0.7.4's two-player
# -train envs; ReverseTicTacToe and Chess load on Python >= 3.12 only (their TextArena modules use 3.12
# f-string syntax).
LEGAL_MOVES: dict[str, LegalMoves] = {
    "TicTacToe": _tictactoe,
    "ReverseTicTacToe": _tictactoe,
    "KuhnPoker": _kuhn_poker,
    "ConnectFour": _connect_four,
    "Nim": _nim,
    "Othello": _othello,
    "Chess": _chess,
    "WildTicTacToe": _listed_after("Available Moves:"),
    "SimpleTak": _listed_after("Available Moves:"),
    "PigDice": _listed_after("Available actions:"),
    "Crusade": _listed_after("Available Moves:"),
    "GameOfPureStrategy": _listed_after("Your remaining hand:"),
    "HighSociety": _listed_after("Your remaining money cards:"),
    "IteratedRockPaperScissors": _fixed("[rock]", "[paper]", "[scissors]"),
    "IteratedMatchingPennies": _fixed("[heads]", "[tails]"),
    "Briscola": _briscola,
    "Snake": _fixed("[up]", "[down]", "[left]", "[right]"),
    "Surround": _fixed("[up]", "[down]", "[left]", "[right]"),
}


def supported_games() -> list[str]:
    """The games whose legal moves can be read."""
    return sorted(LEGAL_MOVES)
