"""The legal answers of a visited state, recorded on the step a model played there (`step_info["legal"]`).

Where a game's legal moves can be read (an env's own `legal_moves()`, else the readers of the `random`
player: TicTacToe, Kuhn Poker, ConnectFour, Nim, Othello, ...), the game loop records before the move:
the legal moves as the env accepts them, the completion token ids that play each one as the sampler writes
them (the move's text after the template's opened prefix, `check` after `[`, then the token `]` at which
sampling stops), and the index of the move the step played (-1: none). Learners that score every legal
answer read it (`unstable_core.learners.legal`); branching adds each move's value (`games.branching`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from unstable_core.games.coverage import game_of
from unstable_core.games.players.legal_moves import LEGAL_MOVES

CLOSING = "]"  # TextArena's moves end with it; the sampler stops at the token that holds it

LegalReader = Callable[[Any, str], list[str]]


def legal_reader(env: Any, env_id: str) -> LegalReader | None:
    """How to read the legal moves of `env` (an env's own `legal_moves()` first), or None."""
    own = getattr(env, "legal_moves", None)
    if callable(own):
        return lambda env, observation: list(own())
    return LEGAL_MOVES.get(game_of(env_id))


def scored_envs(env_ids: Iterable[str]) -> tuple[list[str], list[str]]:
    """(envs whose legal answers are scored, envs that keep the sampled gradient), for the run's start line."""
    ids = list(dict.fromkeys(env_ids))
    return [e for e in ids if game_of(e) in LEGAL_MOVES], [e for e in ids if game_of(e) not in LEGAL_MOVES]


class AnswerTokens:
    """The completion ids that play a move, per tokenizer and opened prefix (cached: a game asks often)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[tuple[str, str], list[int]] = {}
        self.closing = list(tokenizer.encode(CLOSING, add_special_tokens=False))

    def ids(self, move: str, opened: str) -> list[int]:
        """The ids of `move` after the prompt's opened prefix `opened` ("" when the prompt opens none)."""
        key = (move, opened)
        found = self.cache.get(key)
        if found is None:
            text = move[len(opened) :] if opened and move.startswith(opened) else move
            text = text[: -len(CLOSING)] if text.endswith(CLOSING) else text
            found = self.cache[key] = (
                list(self.tokenizer.encode(text, add_special_tokens=False)) + self.closing
            )
        return found


def legal_record(moves: list[str], action: str, tokens: AnswerTokens, opened: str) -> dict[str, Any]:
    """The step's `legal` record: moves, their completion ids and the played index (moves read in any case,
    as TextArena reads them)."""
    played = next((k for k, m in enumerate(moves) if m.lower() == action.strip().lower()), -1)
    return {"moves": list(moves), "ids": [tokens.ids(m, opened) for m in moves], "played": played}
