"""The built-in `random` opponent: a uniformly random legal move, no model, for the games whose legal moves
can be read (`legal_moves`). It is registered as the player `random` of these games (`default_plugins`),
so every other game is refused before any game starts, naming the env (`check_random_supported` says why).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.games.coverage import game_of
from unstable_core.games.players.base import ScriptedPlayer
from unstable_core.games.players.legal_moves import LEGAL_MOVES, supported_games

RANDOM = "random"  # the opponent's name on the command line and its uid in the league (a registered player)


def check_random_supported(env_ids: Iterable[str]) -> None:
    """ConfigError naming the first env whose legal moves the random opponent cannot read."""
    for env_id in env_ids:
        if game_of(env_id) not in LEGAL_MOVES:
            raise ConfigError(
                f"opponent 'random' cannot play {env_id}: it cannot read that game's legal moves; "
                f"random plays {', '.join(supported_games())} (any variant)"
            )


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
