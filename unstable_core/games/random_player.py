"""The built-in `random` opponent: a uniformly random legal move, no model, for games that say their moves.

Legal moves come from the env's state where it holds them (TicTacToe's board, Kuhn Poker's action tree),
else from the last list of moves in the observation ("Available Moves: [0], [1]"). Games that list no
moves (ConnectFour, Chess, negotiation games, ...) are refused by `check_random_supported` before any
game starts. A `RandomPlayer` seat never generates text and never collects training data.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable
from typing import Any

from unstable_core.errors import ConfigError, UnstableError

RANDOM = "random"  # the opponent's name on the command line and its uid in the model registry

LegalMoves = Callable[[Any, str], list[str]]


def _state(env: Any) -> Any:
    return env.state.game_state


def _tictactoe(env: Any, observation: str) -> list[str]:
    board = _state(env)["board"]
    return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if not board[r][c]]


def _kuhn_poker(env: Any, observation: str) -> list[str]:
    return [f"[{k}]" for k in _state(env)["current_legal_action_tree"]]


def _listed_after(marker: str) -> LegalMoves:
    """Moves as the `[...]` items on the line after the last `marker` in the observation."""
    pattern = re.compile(re.escape(marker) + r"([^\n]*)", re.IGNORECASE)

    def moves(env: Any, observation: str) -> list[str]:
        found = pattern.findall(observation)
        return re.findall(r"\[[^\[\]]+\]", found[-1]) if found else []

    return moves


# TextArena game (the env id up to "-v") -> where its legal moves come from; every variant of a game
# (e.g. KuhnPoker-v0-long-train) is covered. Each entry is checked by playing random against random.
LEGAL_MOVES: dict[str, LegalMoves] = {
    "TicTacToe": _tictactoe,
    "KuhnPoker": _kuhn_poker,
    "WildTicTacToe": _listed_after("Available Moves:"),
    "SimpleTak": _listed_after("Available Moves:"),
    "PigDice": _listed_after("Available actions:"),
    "Crusade": _listed_after("Available Moves:"),
}
# Listed but left out: Stratego (its env raises mid-game and random games run past 2000 turns) and
# SpiteAndMalice (random games do not finish); IndianPoker lists '[bet X]' with X left to the player.


def game_of(env_id: str) -> str:
    """The game of a TextArena env id: `KuhnPoker-v0-long-train` -> `KuhnPoker`."""
    return env_id.split("-v", 1)[0]


def supported_games() -> list[str]:
    return sorted(LEGAL_MOVES)


def check_random_supported(env_ids: Iterable[str]) -> None:
    """ConfigError naming the first env whose legal moves the random opponent cannot read."""
    for env_id in env_ids:
        if game_of(env_id) not in LEGAL_MOVES:
            raise ConfigError(
                f"opponent 'random' cannot play {env_id}: its observation does not list the legal moves; "
                f"random plays {', '.join(supported_games())} (any variant)"
            )


class ScriptedPlayer:
    """A seat played by code instead of a model: the game loop calls `move` with the env and its
    observation, and records the move with no prompt tokens, no completion tokens and no log-probs."""

    def move(self, env: Any, observation: str) -> str:
        raise NotImplementedError


class RandomPlayer(ScriptedPlayer):
    """A uniformly random legal move of `env_id`, from its own `random.Random(seed)`: same seed, same moves."""

    def __init__(self, env_id: str, seed: int) -> None:
        check_random_supported([env_id])
        self.env_id = env_id
        self.legal_moves = LEGAL_MOVES[game_of(env_id)]
        self.rng = random.Random(seed)

    def move(self, env: Any, observation: str) -> str:
        moves = self.legal_moves(env, observation)
        if not moves:
            raise UnstableError(f"opponent 'random' found no legal move in {self.env_id} to choose from")
        return self.rng.choice(moves)


def random_seat_seed(game_seed: int, pid: int) -> int:
    """The seed of the random player at seat `pid` of the game seeded `game_seed`."""
    return random.Random(f"{RANDOM}:{game_seed}:{pid}").randrange(2**31)
