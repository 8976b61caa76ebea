"""The learning check's games where strategy matters, beside the letter game of `learning_check`.

- `WinOrStallEnv` ("stall"): one player; answering C in the first turn wins at once, any other letter
  plays on, and after `max_turns` (4) valid moves the game is lost. Its length depends on play and, with
  `unstable run`'s default step shaping (+1 per valid move), a learner that lets shaping accumulate over
  the turns left is paid more for stalling (4 valid moves, then the loss: 4 - 1 = 3) than for winning now
  (1 + 1 = 2): it must still learn to win.
- `HighOrLowEnv` ("card"): two players, a fixed opponent. Seat 0 is dealt jack or king (seat 1 the other)
  and claims A (my card is the higher) or B (the lower); any other letter is invalid and loses. The
  opponent (a scripted player) calls, and the showdown pays the true claim +1 and the false one -1. Only a
  policy that reads its private card wins: a constant answer wins half of the games.

Both speak the game loop's TextArena protocol, flag invalid moves as TextArena's states do
(`state.game_info[pid]["invalid_move"]`), and end their prompts with a word that the learning check's
tiny model reads (`make_letter_model`): the policy only sees the card through its LoRA adapter.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

from unstable_core.games.players.base import ScriptedPlayer

ROUND_WORDS = ("first", "second", "third", "fourth")  # each a single token that marks its round

WIN = "C"
HIGHER, LOWER = "A", "B"
CARDS = ("jack", "king")  # each a single token of the letter model's vocabulary, read by the policy


@attrs.define
class _State:
    """What the game loop reads of a TextArena state: per-seat flags of the last invalid move."""

    game_info: dict[int, dict[str, Any]] = attrs.field(factory=dict)


def _answer(action: str) -> str:
    return (action or "").strip("[] \n")


class WinOrStallEnv:
    """One player, up to `max_turns` turns: C in the first turn wins; any other first answer plays on, every
    later answer is a valid move, and the game is lost after `max_turns` turns. Each prompt ends with its
    round's word, so the first turn is a state of its own."""

    def __init__(self, max_turns: int = 4) -> None:
        if not 1 <= max_turns <= len(ROUND_WORDS):
            raise ValueError(f"max_turns must be in 1..{len(ROUND_WORDS)}, got {max_turns}")
        self.max_turns = max_turns
        self.state = _State()
        self.turns = 0
        self.outcome = ""

    def reset(self, num_players: int, seed: int | None = None) -> None:
        self.state, self.turns, self.outcome = _State({0: {"invalid_move": False}}), 0, ""

    def get_observation(self) -> tuple[int, str]:
        return 0, (
            f"Letters: A, B, C, D, E, F, G, H. C wins now; any other letter plays on, and the game is lost "
            f"after {self.max_turns} turns. Round: {ROUND_WORDS[self.turns]}"
        )

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        won = self.turns == 0 and _answer(action) == WIN
        self.turns += 1
        if won:
            self.outcome = "won"
        elif self.turns >= self.max_turns:
            self.outcome = f"stalled for {self.turns} turns"
        return bool(self.outcome), {}

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, str]]]:
        return {0: 1.0 if self.outcome == "won" else -1.0}, {0: {"reason": self.outcome}}


def dealt_card(seed: int) -> str:
    """Seat 0's card in the game seeded `seed` (seat 1 holds the other)."""
    return random.Random(f"card:{seed}").choice(CARDS)


class HighOrLowEnv:
    """Seat 0 claims its private card is the higher (A) or the lower (B); seat 1, a fixed opponent, calls;
    the showdown pays the true claim +1 and the false one -1. Other letters are invalid and lose."""

    def __init__(self) -> None:
        self.state = _State()
        self.card = CARDS[0]
        self.moves: list[str] = []
        self.outcome: dict[int, float] = {}

    def reset(self, num_players: int, seed: int | None = None) -> None:
        self.state = _State({0: {"invalid_move": False}, 1: {"invalid_move": False}})
        self.card, self.moves, self.outcome = dealt_card(seed or 0), [], {}

    def get_observation(self) -> tuple[int, str]:
        if not self.moves:
            return 0, f"A: my card is the higher. B: my card is the lower. Your card: {self.card}"
        return 1, "Your opponent made a claim. Answer [call]."

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        self.moves.append(_answer(action))
        claim = self.moves[0]
        if claim not in (HIGHER, LOWER):
            self.state.game_info[0]["invalid_move"] = True
            self.outcome = {0: -1.0, 1: 1.0}
        elif len(self.moves) == 2:  # the opponent called: showdown
            right = (claim == HIGHER) == (self.card == "king")
            self.outcome = {0: 1.0 if right else -1.0, 1: -1.0 if right else 1.0}
        return bool(self.outcome), {}

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, str]]]:
        return dict(self.outcome), {0: {"reason": f"card {self.card}, moves {self.moves}"}}


class Caller(ScriptedPlayer):
    """The card game's fixed opponent: it calls every claim."""

    def move(self, env: Any, observation: str) -> str:
        return "[call]"
