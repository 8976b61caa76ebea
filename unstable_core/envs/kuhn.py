"""Kuhn Poker as its rules say, scored in chips: TextArena's game (same prompts, same observations as
`KuhnPoker-v0-*-train`) where a bet and a call put a chip into the pot, and whose final reward is each
player's net chips, not +1/-1 for the player with more chips.

TextArena's KuhnPoker states "[bet]: add 1 chip to the pot" but never adds it: every round is won or lost
by the two antes, so betting costs and wins nothing, and folding J to a bet loses as much as calling. That
is not Kuhn Poker, whose value, Nash equilibria and exploitability (OpenSpiel's, the
`kuhn-exploitability` probe's) are in chips: a fold loses the ante (1), a called bet loses 2. The
one-round variant (`KuhnPoker-v0-chips`) is exactly the game whose policy that probe measures. A game
ended by an invalid move keeps TextArena's -1 / +1.
"""

from __future__ import annotations

import re

from textarena.envs.KuhnPoker.env import KuhnPokerEnv

MOVE = re.compile(r"\[(check|bet|fold|call)\]", re.IGNORECASE)  # what TextArena's KuhnPoker reads


class KuhnPokerChips(KuhnPokerEnv):
    """TextArena's Kuhn Poker whose rewards, once its rounds are played, are the players' net chips."""

    def __init__(self, max_rounds: int = 1) -> None:
        super().__init__(max_rounds=max_rounds)

    def step(self, action: str) -> tuple[bool, dict]:
        """A legal bet or call puts the mover's chip into the pot, then TextArena plays the move."""
        game, match = self.state.game_state, MOVE.search(action.strip())
        move = match.group(1).lower() if match else None
        if move in ("bet", "call") and move in game["current_legal_action_tree"]:
            game["pot"] += 1
            game["player_chips"][self.state.current_player_id] -= 1
        return super().step(action)

    def _init_round(self) -> None:
        game = self.state.game_state
        ending = game["current_round"] + 1 > self.max_rounds
        chips = dict(game["player_chips"])  # before the round TextArena deals after the last one
        super()._init_round()
        if ending and self.state.done:
            self.state.rewards = {pid: float(chips[pid]) for pid in (0, 1)}


def one_round() -> KuhnPokerChips:
    """`KuhnPoker-v0-chips`: one round, the game the `kuhn-exploitability` probe measures."""
    return KuhnPokerChips(max_rounds=1)


def five_rounds() -> KuhnPokerChips:
    """`KuhnPoker-v0-short-chips`: the five rounds of `KuhnPoker-v0-short-train`, in net chips."""
    return KuhnPokerChips(max_rounds=5)
