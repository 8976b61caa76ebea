"""Which games a registered scripted player or probe covers (`games=[...]` of `register_players` and
`register_probes`): game names (an env id up to `-v`: every variant) or exact env ids. A name or game it
does not cover is one ConfigError line naming the known ones and what each covers."""

from __future__ import annotations

from collections.abc import Iterable

from unstable_core.errors import ConfigError
from unstable_core.registry import Component

VERBS = {"player": ("opponent", "play"), "probe": ("probe", "measure")}  # kind -> (what it is, what it does)


def game_of(env_id: str) -> str:
    """The game of an env id: `KuhnPoker-v0-long-train` -> `KuhnPoker`."""
    return env_id.split("-v", 1)[0]


def covers(component: Component, env_id: str) -> bool:
    """Whether a player or probe registered for `games` covers `env_id` (its game, any variant, or the id)."""
    games = component.options["games"]
    return env_id in games or game_of(env_id) in games


def games_text(games: Iterable[str], any_variant: bool = True) -> str:
    """What a player or probe covers, in words: `TicTacToe, KuhnPoker (any variant)` for game names (the
    note left out with `any_variant=False`), `UtpNim-v0 only` for exact env ids."""
    games = list(games)
    names = [g for g in games if g == game_of(g)]
    ids = [g for g in games if g != game_of(g)]
    parts = [", ".join(names) + (" (any variant)" if any_variant else "")] if names else []
    return " and ".join(parts + ([f"{', '.join(ids)} only"] if ids else []))


def registered(kind: str) -> list[Component]:
    """The registered players or probes (`kind`), sorted by name."""
    from unstable_core.plugins import get_registry

    return get_registry().by_kind(kind)


def described(kind: str) -> list[str]:
    """`name (what it covers)` for each registered player or probe."""
    return [f"{c.name} ({games_text(c.options['games'], any_variant=False)})" for c in registered(kind)]


def covering(kind: str, name: str, env_ids: Iterable[str] = ()) -> Component:
    """The registered player or probe `name`, checked to cover every env of `env_ids`: an unknown name or an
    env it does not cover is a ConfigError naming the known ones and what each covers."""
    found = next((c for c in registered(kind) if c.name == name), None)
    if found is None:
        raise ConfigError(f"unknown {kind} {name!r}; the {kind}s are: {', '.join(described(kind)) or 'none'}")
    what, verb = VERBS[kind]
    for env_id in env_ids:
        if not covers(found, env_id):
            raise ConfigError(
                f"{what} {name!r} cannot {verb} {env_id}: it {verb}s {games_text(found.options['games'])}; "
                f"the {kind}s are: {', '.join(described(kind))}"
            )
    return found


def check_covered(kind: str, names_and_envs: Iterable[tuple[str, str]]) -> None:
    """Every (name, env id) pair whose name is a registered player or probe (`kind`) is covered: a
    ConfigError naming the first that is not; other names (models) are skipped."""
    known = {c.name for c in registered(kind)}
    for name, env_id in names_and_envs:
        if name in known:
            covering(kind, name, [env_id])
