"""The game analyses plugins registered (`register_game_analyses`): scripted players and probes, by name,
with the games each supports; checked here before anything starts, so that a wrong name or game is one
line naming the known ones."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from unstable_core.errors import ConfigError
from unstable_core.registry import Component

PLAYER, PROBE = "player", "probe"


def game_of(env_id: str) -> str:
    """The game of an env id: `KuhnPoker-v0-long-train` -> `KuhnPoker`."""
    return env_id.split("-v", 1)[0]


def analyses(kind: str) -> list[Component]:
    """The registered analyses of one kind ("player" or "probe"), sorted by name."""
    from unstable_core.plugins import get_registry

    return [c for c in get_registry().by_kind("analysis") if c.options["kind"] == kind]


def names(kind: str) -> list[str]:
    """The names of the registered analyses of one kind."""
    return [c.name for c in analyses(kind)]


def is_player(name: object) -> bool:
    """Whether `name` is a registered scripted player (an opponent played by code, such as `random`)."""
    return isinstance(name, str) and name in names(PLAYER)


def supports(component: Component, env_id: str) -> bool:
    """Whether an analysis registered for `games` covers `env_id` (its game, any variant, or the id itself)."""
    games = component.options["games"]
    return env_id in games or game_of(env_id) in games


def _get(kind: str, name: str) -> Component:
    for component in analyses(kind):
        if component.name == name:
            return component
    known = ", ".join(_described(kind)) or "none"
    raise ConfigError(f"unknown {kind} {name!r}; the {kind}s are: {known}")


def _described(kind: str) -> list[str]:
    """`name (Game, Game)` for each registered analysis of `kind`."""
    return [f"{c.name} ({', '.join(c.options['games'])})" for c in analyses(kind)]


def check_supported(kind: str, name: str, env_ids: Iterable[str]) -> Component:
    """The analysis `name` of `kind`, after checking that it covers every env of `env_ids`; a ConfigError
    naming the known ones (and the games of each) otherwise."""
    component = _get(kind, name)
    for env_id in env_ids:
        if not supports(component, env_id):
            verb = "play" if kind == PLAYER else "measure"
            raise ConfigError(
                f"{'opponent' if kind == PLAYER else 'probe'} {name!r} cannot {verb} {env_id}: it {verb}s "
                f"{', '.join(component.options['games'])} (any variant); the {kind}s are: "
                f"{', '.join(_described(kind))}"
            )
    return component


def check_players(names_and_envs: Iterable[tuple[str, str]]) -> None:
    """Every (scripted player, env id) pair can be played (a ConfigError naming the first that cannot);
    names that are no scripted player (models) are skipped."""
    for name, env_id in names_and_envs:
        if is_player(name):
            check_supported(PLAYER, name, [env_id])


def seat_seed(name: str, game_seed: int, pid: int) -> int:
    """The seed of the scripted player `name` at seat `pid` of the game seeded `game_seed`."""
    return random.Random(f"{name}:{game_seed}:{pid}").randrange(2**31)


def load_player_factory(name: str) -> Any:
    """The factory `(env_id, seed) -> ScriptedPlayer` of the scripted player `name`."""
    return check_supported(PLAYER, name, []).load()


def make_player(name: str, env_id: str, game_seed: int, pid: int) -> Any:
    """The scripted player `name` for seat `pid` of a game of `env_id` seeded `game_seed`."""
    return check_supported(PLAYER, name, [env_id]).load()(env_id, seat_seed(name, game_seed, pid))


def load_probe(name: str, env_id: str) -> Any:
    """The probe `name`, checked to cover `env_id`: a callable `(policy, env_id) -> ProbeResult`."""
    return check_supported(PROBE, name, [env_id]).load()
