"""A seat played by code instead of a model: the base class of every scripted player."""

from __future__ import annotations

from typing import Any

SCRIPTED = "scripted"  # the finish_reason of a step a scripted player moved


class ScriptedPlayer:
    """A seat played by code: the game loop calls `move` with the real env and the seat's observation, and
    records the move with no prompt tokens, no completion tokens and no log-probs. Registered players
    (`register_players`) are factories `(env_id, seed)` of these; the collector seeds each from the game's
    seed and its seat (`players.catalogue.seat_seed`), so that a replayed game replays its moves."""

    def move(self, env: Any, observation: str) -> str:
        """The seat's move, written as the game reads it (TextArena: `[3]`, `[check]`)."""
        raise NotImplementedError
