"""Named components by kind (learners, samplers, transforms, ...), with the plugin that provided them.

Targets may be objects or lazy `"module:Name"` strings; a string is imported only by `Component.load()`,
so that filling the registry (and listing plugins) never imports torch.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from unstable_core.errors import ComponentFailed, UnstableError, describe

# kind -> the registration hook of `hookspecs` that fills it.
KINDS: dict[str, str] = {
    "learner": "register_learners",
    "env_sampler": "register_env_samplers",
    "model_sampler": "register_model_samplers",
    "reward_transform": "register_reward_transforms",
    "tracker": "register_trackers",
    "backend": "register_backends",
    "template": "register_templates",
    "env": "register_envs",
    "player": "register_players",
    "probe": "register_probes",
}

# Names our own plugin distributions provide, so that asking for one that is not installed says
# which package to install (kept by hand, as the plugins may be absent; tests/test_registry.py checks it
# against what the installed plugins register).
KNOWN_PROVIDERS: dict[str, dict[str, str]] = {
    "learner": {
        "reinforce": "unstable-reinforce",
        "reinforce-legal": "unstable-reinforce",
        "a2c": "unstable-a2c",
        "ppo": "unstable-ppo",
        "cispo": "unstable-cispo",
        "neurd": "unstable-neurd",
        "mmd": "unstable-mmd",
    },
    "env_sampler": {"random": "unstable-samplers", "adaptive": "unstable-samplers"},
    "model_sampler": {
        name: "unstable-samplers" for name in ("mirror", "fixed", "lagged", "trueskill", "win-rate")
    },
    "reward_transform": {
        name: "unstable-rewards"
        for name in (
            "role-advantage",
            "role-advantage-by-env",
            "spiral-rae",
            "reward-for-format",
            "penalty-for-invalid-move",
            "normalize",
            "normalize-by-env",
            "group-relative",
            "entropy-bonus",
        )
    },
}

# Where the distributions of this repository live, for the install hint.
_LOCAL_PLUGIN_DIRS = {
    "unstable-reinforce": "plugins/unstable_reinforce",
    "unstable-a2c": "plugins/unstable_a2c",
    "unstable-ppo": "plugins/unstable_ppo",
    "unstable-cispo": "plugins/unstable_cispo",
    "unstable-neurd": "plugins/unstable_neurd",
    "unstable-mmd": "plugins/unstable_mmd",
    "unstable-samplers": "plugins/unstable_samplers",
    "unstable-rewards": "plugins/unstable_rewards",
}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_IMPORT_STRING = re.compile(rf"^{_DOTTED}:{_DOTTED}$")


class UnknownComponentError(UnstableError, LookupError):
    """A component name that no installed plugin provides."""


class DuplicateComponentError(UnstableError):
    """Two plugins registered the same name for the same kind; `dists` names both distributions."""

    def __init__(self, message: str, kind: str = "", name: str = "", dists: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kind, self.name, self.dists = kind, name, dists


def install_hint(dist: str) -> str:
    """How to install one of our plugin distributions (from PyPI, or from this repository)."""
    local = _LOCAL_PLUGIN_DIRS.get(dist)
    where = f" (or `pip install -e {local}` from a checkout of unstable)" if local else ""
    return f"pip install {dist}{where}"


def check_import_string(target: str) -> None:
    """Reject a lazy target that is not of the form `"package.module:Name"` (before anything imports it)."""
    if not _IMPORT_STRING.match(target):
        raise UnstableError(f"import string {target!r} must look like 'package.module:Name'")


def load_target(target: Any) -> Any:
    """Resolve a `"module:Name"` import string (a non-string target is returned unchanged)."""
    if not isinstance(target, str):
        return target
    check_import_string(target)
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnstableError(f"cannot import {target!r}: {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UnstableError(f"cannot import {target!r}: {module_name!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


@attrs.define
class Component:
    """One registered component: a class or factory, or a lazy import string naming one."""

    kind: str
    name: str
    target: Any
    description: str = ""
    plugin: str = ""  # the entry point (or built-in module) that registered it
    dist: str = ""  # the distribution that ships that plugin
    options: dict[str, Any] = attrs.field(factory=dict)  # what `register` was told beside the target

    def load(self) -> Any:
        """The class or factory itself (imports a lazy target on first use)."""
        if isinstance(self.target, str):
            try:
                self.target = load_target(self.target)
            except UnstableError as exc:
                raise UnstableError(
                    f"{self.kind} {self.name!r} of {self.provider}: {exc}; reinstall or upgrade {self.provider}"
                ) from exc
        return self.target

    @property
    def provider(self) -> str:
        """The distribution that registered it (else its entry point)."""
        return self.dist or self.plugin or "?"

    def failed(self, exc: BaseException) -> ComponentFailed:
        """One line for an error this component raised while it ran, naming it, its kind and its provider:
        `probe 'nim-takes' of my-games failed: KeyError: '[1]'`."""
        return ComponentFailed(
            f"{self.kind.replace('_', ' ')} {self.name!r} of {self.provider} failed: {describe(exc)}"
        )

    @property
    def target_name(self) -> str:
        """`"module:Name"` of the target, without importing it."""
        if isinstance(self.target, str):
            return self.target
        module = getattr(self.target, "__module__", "?")
        return f"{module}:{getattr(self.target, '__qualname__', repr(self.target))}"


def check_options(kind: str, options: dict[str, Any], who: str) -> dict[str, Any]:
    """The options of a registration, checked and completed by its kind's checker (`OPTIONS`); a kind
    without one takes none."""
    check = OPTIONS.get(kind)
    if check is None:
        if options:
            raise UnstableError(f"{who}: a {kind} takes no options, got {', '.join(sorted(options))}")
        return options
    return check(options, who)


def _check_env(options: dict[str, Any], who: str) -> dict[str, Any]:
    """An env's options: `players`, an int or the list of player counts it supports (default 2); `task`, a
    single-turn task, one player; `wrappers`, a game's TextArena wrappers, classes or import strings,
    applied in order as TextArena's `register` takes them."""
    unknown = sorted(set(options) - {"players", "task", "wrappers"})
    if unknown:
        raise UnstableError(
            f"{who}: unknown option(s) {', '.join(unknown)}; an env takes players=, task= and wrappers="
        )
    task = options.get("task", False)
    if not isinstance(task, bool):
        raise UnstableError(f"{who}: task must be True or False, got {task!r}")
    players = options.get("players", 1 if task else 2)
    counts = [players] if isinstance(players, int) else players
    if (
        not isinstance(counts, list | tuple)
        or not counts
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts)
    ):
        raise UnstableError(f"{who}: players must be an int >= 1 or a list of them, got {players!r}")
    if task and list(counts) != [1]:
        raise UnstableError(f"{who}: a task has one player, got players={players!r}")
    checked: dict[str, Any] = {"players": sorted(set(counts)), "task": task}
    if "wrappers" in options:
        checked["wrappers"] = _check_wrappers(options["wrappers"], task, who)
    return checked


def _check_games(options: dict[str, Any], who: str) -> dict[str, Any]:
    """A scripted player's or a probe's options: `games`, a non-empty list of game names (every variant)
    or exact env ids; required."""
    unknown = sorted(set(options) - {"games"})
    if unknown:
        raise UnstableError(f"{who}: unknown option(s) {', '.join(unknown)}; it takes games= only")
    games = options.get("games")
    if (
        not isinstance(games, list | tuple)
        or not games
        or not all(isinstance(g, str) and _NAME.match(g) for g in games)
    ):
        raise UnstableError(
            f"{who}: games must be a non-empty list of game names or env ids (e.g. ['TicTacToe']), got {games!r}"
        )
    return {"games": list(dict.fromkeys(games))}


def _check_wrappers(wrappers: Any, task: bool, who: str) -> list[Any]:
    """A game's `wrappers=`: a list of wrapper classes or `"module:Name"` strings (not imported here)."""
    if task:
        raise UnstableError(f"{who}: a task takes no wrappers (it is no TextArena env)")
    if not isinstance(wrappers, list | tuple) or not all(callable(w) or isinstance(w, str) for w in wrappers):
        raise UnstableError(
            f"{who}: wrappers must be a list of wrapper classes or import strings, got {wrappers!r}"
        )
    for wrapper in wrappers:
        if isinstance(wrapper, str):
            check_import_string(wrapper)
    return list(wrappers)


# kind -> the checker of the options its `register` takes beside the target
OPTIONS: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "env": _check_env,
    "player": _check_games,
    "probe": _check_games,
}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise UnstableError(f"unknown component kind {kind!r}; the kinds are: {', '.join(KINDS)}")


@attrs.define
class Registry:
    """Components by kind and name; names a plugin failed to claim alone are kept as conflicts."""

    _items: dict[str, dict[str, Component]] = attrs.field(factory=lambda: {k: {} for k in KINDS})
    _conflicts: dict[tuple[str, str], DuplicateComponentError] = attrs.field(factory=dict)
    # distribution -> the first error of its plugin, so an unknown name can point at the broken plugin.
    broken: dict[str, str] = attrs.field(factory=dict)

    def add(self, component: Component) -> None:
        """Register one component; a bad name or target raises, a taken name raises `DuplicateComponentError`."""
        _check_kind(component.kind)
        provider = component.provider
        if not isinstance(component.name, str) or not _NAME.match(component.name):
            raise UnstableError(
                f"{provider} registered a {component.kind} named {component.name!r}; a name is letters, "
                "digits, '-', '_' or '.', starting with a letter or digit"
            )
        if isinstance(component.target, str):
            check_import_string(component.target)
        elif not callable(component.target):
            raise UnstableError(
                f"{provider} registered {component.kind} {component.name!r} as {component.target!r}; "
                "register a class, a factory or an import string 'package.module:Name'"
            )
        component.options = check_options(
            component.kind, component.options, f"{provider}'s {component.name!r}"
        )
        taken = self._items[component.kind].get(component.name)
        if taken is not None:
            raise _duplicate(taken, component)
        self._items[component.kind][component.name] = component

    def get(self, kind: str, name: str) -> Component:
        """The component, or an `UnknownComponentError` listing what is installed and what to install."""
        _check_kind(kind)
        conflict = self._conflicts.get((kind, name))
        if conflict is not None:
            raise DuplicateComponentError(str(conflict), kind=kind, name=name, dists=conflict.dists)
        found = self._items[kind].get(name)
        if found is not None:
            return found
        raise UnknownComponentError(self._unknown_message(kind, name))

    def _unknown_message(self, kind: str, name: str) -> str:
        label = kind.replace("_", " ")
        installed = self.names(kind)
        message = f"unknown {label} {name!r}; installed {label}s: {', '.join(installed) or 'none'}"
        close = difflib.get_close_matches(name, installed, n=1)
        if close:
            message += f"; did you mean {close[0]!r}?"
        provider = KNOWN_PROVIDERS.get(kind, {}).get(name)
        if provider in self.broken:
            message += (
                f"; {name!r} is provided by {provider}, which is installed but broken: "
                f"{self.broken[provider]} (see `unstable plugins`)"
            )
        elif provider:
            message += f"; {name!r} is provided by {provider}: {install_hint(provider)}"
        elif self.broken:
            message += f"; plugins with errors: {', '.join(sorted(self.broken))} (see `unstable plugins`)"
        return message

    def mark_conflict(self, error: DuplicateComponentError) -> None:
        """Remember a name two plugins claim: using it fails with the message naming both."""
        self._conflicts[(error.kind, error.name)] = error

    def load(self, kind: str, name: str) -> Any:
        """The class or factory registered as `name` of `kind` (imported now if lazy)."""
        return self.get(kind, name).load()

    def names(self, kind: str) -> list[str]:
        """The registered names of one kind, sorted."""
        _check_kind(kind)
        return sorted(self._items[kind])

    def by_kind(self, kind: str) -> list[Component]:
        """The components of one kind, sorted by name."""
        return [self._items[kind][n] for n in self.names(kind)]

    def __iter__(self) -> Iterator[Component]:
        for kind in self._items:
            yield from self.by_kind(kind)


def _duplicate(taken: Component, new: Component) -> DuplicateComponentError:
    first, second = taken.dist or taken.plugin or "?", new.dist or new.plugin or "?"
    what = f"{new.kind} {new.name!r}"
    if first == second:
        message = f"{what} is registered twice by {first}; register each name once"
    else:
        message = (
            f"{what} is registered twice: by {first} and by {second}; uninstall one of the two distributions"
        )
    return DuplicateComponentError(message, kind=new.kind, name=new.name, dists=(first, second))
