"""Kuhn Poker's `optimal` player: a Nash equilibrium strategy, read from the real env's state.

Kuhn's equilibria form a family in alpha in [0, 1/3] (Kuhn 1950; OpenSpiel's `kuhn_poker` numbering,
player 0 acting first in a round: TextArena's starting player of that round):

    first to act:     bet with J alpha, Q never, K 3 alpha
    after a check:    bet with J 1/3, Q never, K always
    facing a bet:     call with J never, Q 1/3, K always
    after check, bet: call with J never, Q alpha + 1/3, K always

Each game draws its own alpha (and each mixed choice) from the player's seeded `random.Random`, so that a
model playing it many times meets the whole family, not one line. Against it every strategy loses, in
expectation, at least the game's value; it exploits nothing, so what beats it by more is luck. As a
training opponent it punishes only dominated moves (calling with J, folding K, betting Q first) and
leaves the moves the equilibrium is indifferent to where the learner's own regulariser holds them.
"""

from __future__ import annotations

import random
from typing import Any

from unstable_core.games.players.base import ScriptedPlayer

# probability of the aggressive move (bet or call) by OpenSpiel history, for cards J, Q, K; "a" is alpha
NASH: dict[str, tuple[Any, Any, Any]] = {
    "": ("a", 0.0, "3a"),
    "p": (1 / 3, 0.0, 1.0),
    "b": (0.0, 1 / 3, 1.0),
    "pb": (0.0, "a+1/3", 1.0),
}


def history(env: Any) -> str:
    """The OpenSpiel history of the round in progress, read from the mover's place and legal moves: "" (first
    to act), "p" (after a check), "b" (facing a bet), "pb" (after checking and facing a bet)."""
    game = env.state.game_state
    first = env.state.current_player_id == game["starting_player"]
    facing_bet = "call" in game["current_legal_action_tree"]
    return {(True, False): "", (False, False): "p", (False, True): "b", (True, True): "pb"}[
        (first, facing_bet)
    ]


def aggressive_probability(card: int, hist: str, alpha: float) -> float:
    """The equilibrium's probability of betting or calling with `card` (0 J, 1 Q, 2 K) after `hist`."""
    value = NASH[hist][card]
    return {"a": alpha, "3a": 3 * alpha, "a+1/3": alpha + 1 / 3}.get(value, value)  # type: ignore[arg-type]


class KuhnNashPlayer(ScriptedPlayer):
    """A Nash equilibrium of Kuhn Poker (see the module's docstring), alpha drawn for each game."""

    def __init__(self, env_id: str, seed: int) -> None:
        self.env_id = env_id
        self.rng = random.Random(seed)
        self.alpha = self.rng.uniform(0.0, 1 / 3)

    def move(self, env: Any, observation: str) -> str:
        game = env.state.game_state
        card = game["player_cards"][env.state.current_player_id]
        hist = history(env)
        aggressive = self.rng.random() < aggressive_probability(card, hist, self.alpha)
        if "call" in game["current_legal_action_tree"]:
            return "[call]" if aggressive else "[fold]"
        return "[bet]" if aggressive else "[check]"
