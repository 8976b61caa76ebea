"""The scripted players plugins registered (`register_players`), by name, with the games each plays:
checked before anything starts, so that a wrong name or game is one line naming the known ones, and made
for one seat of one game, seeded from the game's seed and the seat."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable
from typing import Any

from unstable_core.errors import ComponentFailed, UnstableError
from unstable_core.games.coverage import check_covered, covering, registered
from unstable_core.games.players.base import ScriptedPlayer
from unstable_core.registry import Component

PLAYER = "player"


def names() -> list[str]:
    """The names of the registered scripted players."""
    return [c.name for c in registered(PLAYER)]


def is_player(name: object) -> bool:
    """Whether `name` is a registered scripted player (an opponent played by code, such as `random`)."""
    return isinstance(name, str) and name in names()


def check_players(names_and_envs: Iterable[tuple[str, str]]) -> None:
    """Every (scripted player, env id) pair can be played (a ConfigError naming the first that cannot);
    names that are no scripted player (models) are skipped."""
    check_covered(PLAYER, names_and_envs)


def seat_seed(name: str, game_seed: int, pid: int) -> int:
    """The seed of the scripted player `name` at seat `pid` of the game seeded `game_seed`."""
    return random.Random(f"{name}:{game_seed}:{pid}").randrange(2**31)


def load_player_factory(name: str) -> Callable[[str, int], ScriptedPlayer]:
    """The factory `(env_id, seed) -> ScriptedPlayer` of the scripted player `name`; what its players raise
    names it and its plugin."""
    return functools.partial(_made, covering(PLAYER, name))


def make_player(name: str, env_id: str, game_seed: int, pid: int) -> ScriptedPlayer:
    """The scripted player `name` for seat `pid` of a game of `env_id` seeded `game_seed`; what it raises
    names it and its plugin."""
    return _made(covering(PLAYER, name, [env_id]), env_id, seat_seed(name, game_seed, pid))


def _made(component: Component, env_id: str, seed: int) -> ScriptedPlayer:
    try:
        player = component.load()(env_id, seed)
    except UnstableError:  # its own refusal (a game it cannot play) or one naming it already
        raise
    except Exception as exc:
        raise component.failed(exc) from exc
    return NamedPlayer(component, player)


class NamedPlayer(ScriptedPlayer):
    """A registered player as the game loop plays it: its moves, and an error it raises as one line naming
    it, its kind and its plugin. Its other attributes are the player's own (`rng`, which branching
    reseeds)."""

    def __init__(self, component: Component, player: ScriptedPlayer) -> None:
        self.component, self.player = component, player

    def move(self, env: Any, observation: str) -> str:
        try:
            return self.player.move(env, observation)
        except ComponentFailed:
            raise
        except Exception as exc:
            raise self.component.failed(exc) from exc

    def __getattr__(self, name: str) -> Any:
        if name in ("component", "player"):  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.player, name)
