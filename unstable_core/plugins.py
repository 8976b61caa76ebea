"""Plugin discovery: entry points of the group `unstable`, loaded one by one, into one `Registry`.

- Every entry point is loaded on its own; a failure is kept on that distribution's `PluginInfo`
  (and raised as `PluginLoadError` when `UNSTABLE_STRICT_PLUGINS=1`), and every other plugin still works.
- `UNSTABLE_LOAD_PLUGINS=dist1,dist2` loads only those distributions; an empty value loads none.
- The core's built-ins are registered through the same hooks, as the distribution `unstable-core`.
- Hook functions that match no hook spec are reported, like pluggy's `check_pending`.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import threading
from collections.abc import Callable
from importlib import metadata
from typing import Any

import attrs
import pluggy

from unstable_core import hookspecs
from unstable_core.errors import UnstableError
from unstable_core.registry import KINDS, Component, DuplicateComponentError, Registry, load_target

ENTRY_POINT_GROUP = "unstable"
CORE_DIST = "unstable-core"
BUILTINS = "unstable_core.default_plugins"  # the core's own plugin, loaded like any other
LOAD_ENV = "UNSTABLE_LOAD_PLUGINS"
STRICT_ENV = "UNSTABLE_STRICT_PLUGINS"
# a hook kept for one release: its name -> the kinds its `register(..., kind=KIND)` picks from
ALIASES: dict[str, tuple[str, ...]] = {"register_game_analyses": ("player", "probe")}
HOOKS: list[str] = [*KINDS.values(), *ALIASES, "register_commands"]


class PluginLoadError(UnstableError):
    """A plugin failed to load while `UNSTABLE_STRICT_PLUGINS=1` asks for failures to be raised."""


@attrs.define
class PluginInfo:
    """What one distribution's plugin provided, or the error that stopped it."""

    name: str
    version: str
    hooks: list[str] = attrs.field(factory=list)
    provides: dict[str, list[str]] = attrs.field(factory=dict)
    error: str | None = None
    builtin: bool = False
    descriptions: dict[tuple[str, str], str] = attrs.field(factory=dict)  # (kind, name) -> as registered

    def components(self) -> list[dict[str, str]]:
        """Each component this distribution provides: kind, name and the description it registered."""
        return [
            {"kind": kind, "name": name, "description": self.descriptions.get((kind, name), "")}
            for kind, names in self.provides.items()
            for name in names
        ]

    def add_error(self, message: str) -> None:
        """Keep one more problem of this plugin (all of them are shown, joined by '; ')."""
        self.error = message if not self.error else f"{self.error}; {message}"

    def to_json(self) -> dict[str, Any]:
        """The `unstable plugins --json` entry: name, version, hooks, provides (names by kind), components
        (kind, name, description) and, if any, error."""
        data: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "hooks": list(self.hooks),
            "provides": {kind: list(names) for kind, names in self.provides.items()},
            "components": self.components(),
        }
        if self.error:
            data["error"] = self.error
        return data


@attrs.define
class PluginState:
    """The plugin manager, the registry it filled, one `PluginInfo` per distribution, the loaded modules."""

    manager: pluggy.PluginManager
    registry: Registry
    plugins: list[PluginInfo]
    # pluggy plugin name ("dist:entry-point") -> (the distribution's info, the loaded module)
    loaded: dict[str, tuple[PluginInfo, Any]] = attrs.field(factory=dict)


def normalize_dist(name: str) -> str:
    """PEP 503 normalisation, so `unstable_rewards` and `Unstable.Rewards` name one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def strict_plugins() -> bool:
    """Whether `UNSTABLE_STRICT_PLUGINS` asks for a broken plugin to raise instead of being listed."""
    value = os.environ.get(STRICT_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise UnstableError(f"{STRICT_ENV}={value!r} is not understood; set it to 1 or 0")


def allowed_dists() -> set[str] | None:
    """None: load every plugin; otherwise the normalised names in `UNSTABLE_LOAD_PLUGINS`."""
    value = os.environ.get(LOAD_ENV)
    if value is None:
        return None
    return {normalize_dist(v.strip()) for v in value.split(",") if v.strip()}


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _fail(state: PluginState, info: PluginInfo, message: str, cause: BaseException | None = None) -> None:
    """Record a plugin's problem; under `UNSTABLE_STRICT_PLUGINS=1` raise it instead."""
    info.add_error(message)
    state.registry.broken.setdefault(info.name, message)
    if strict_plugins():
        raise PluginLoadError(f"plugin {info.name}: {message}") from cause


def _entry_points_by_dist() -> dict[str, tuple[str, list[metadata.EntryPoint]]]:
    """normalised distribution -> (version, its entry points), each entry point once, sorted by name."""
    found: dict[str, tuple[str, list[metadata.EntryPoint]]] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = normalize_dist(ep.dist.name) if ep.dist else normalize_dist(ep.name)
        version = ep.dist.version if ep.dist else "?"
        _, eps = found.setdefault(dist, (version, []))
        if all(e.name != ep.name for e in eps):  # the same distribution seen twice on sys.path
            eps.append(ep)
    return {d: (v, sorted(eps, key=lambda e: e.name)) for d, (v, eps) in sorted(found.items())}


def _select(by_dist: dict[str, Any]) -> dict[str, Any]:
    """The distributions `UNSTABLE_LOAD_PLUGINS` allows; naming one that is not installed is an error."""
    allowed = allowed_dists()
    if allowed is None:
        return by_dist
    missing = sorted(allowed - set(by_dist) - {CORE_DIST})
    if missing:
        raise UnstableError(
            f"{LOAD_ENV} names {', '.join(missing)}, which is not installed; installed plugins: "
            f"{', '.join(by_dist) or 'none'}; fix the variable or install the plugin"
        )
    return {d: v for d, v in by_dist.items() if d in allowed}


def discover() -> PluginState:
    """Load the built-ins and every allowed entry point of the group `unstable` into a fresh state."""
    strict_plugins()  # a value it does not understand is an error even when every plugin loads
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    state = PluginState(manager=manager, registry=Registry(), plugins=[])

    builtins = importlib.import_module(BUILTINS)  # by name, as an entry point is loaded
    core = PluginInfo(name=CORE_DIST, version=_core_version(), builtin=True)
    state.plugins.append(core)
    _add_plugin(state, core, "builtins", builtins)

    for dist, (version, eps) in _select(_entry_points_by_dist()).items():
        info = PluginInfo(name=dist, version=version)
        state.plugins.append(info)
        for ep in eps:
            try:
                module = ep.load()
            except Exception as exc:  # one broken plugin must not take the others down
                _fail(state, info, f"could not import {ep.value!r}: {_one_line(exc)}", exc)
                continue
            _add_plugin(state, info, ep.name, module)
    return state


def _core_version() -> str:
    try:
        return metadata.version(CORE_DIST)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _add_plugin(state: PluginState, info: PluginInfo, plugin: str, module: Any) -> None:
    """Register one plugin module with pluggy, report unknown hooks, and run its registration hooks."""
    plugin_name = f"{info.name}:{plugin}"
    try:
        state.manager.register(module, name=plugin_name)
    except (ValueError, pluggy.PluginValidationError) as exc:  # a bad hook signature, a module twice
        _fail(state, info, f"entry point {plugin!r} was rejected: {_one_line(exc)}", exc)
        return
    state.loaded[plugin_name] = (info, module)
    callers = state.manager.get_hookcallers(module) or []
    info.hooks.extend(c.name for c in callers if c.has_spec() and c.name not in info.hooks)
    unknown = sorted(
        c.name
        for c in callers
        if not c.has_spec() and any(i.plugin is module and not i.optionalhook for i in c.get_hookimpls())
    )
    if unknown:
        _fail(
            state,
            info,
            f"unknown hook(s) {', '.join(unknown)} in {plugin!r}; the hooks are: {', '.join(HOOKS)}",
        )
    hooks = [(hook, _register_callback(state, info, plugin, kind)) for kind, hook in KINDS.items()]
    hooks += [(hook, _alias_callback(state, info, plugin, kinds)) for hook, kinds in ALIASES.items()]
    for hook_name, register in hooks:
        for impl in _impls(state.manager, hook_name, module):
            try:
                _call(impl, register=register)
            except PluginLoadError:
                raise
            except Exception as exc:  # a broken hook must not take the others down
                _fail(state, info, f"{hook_name} of {plugin!r} failed: {_one_line(exc)}", exc)


def _call(impl: Any, **kwargs: Any) -> Any:
    """Call one hook implementation the way pluggy does: with the spec's arguments it asks for."""
    return impl.function(*[kwargs[name] for name in impl.argnames])


def _impls(manager: pluggy.PluginManager, hook_name: str, module: Any) -> list[Any]:
    """The hook implementations of one module for one hook."""
    return [i for i in getattr(manager.hook, hook_name).get_hookimpls() if i.plugin is module]


def _register_callback(state: PluginState, info: PluginInfo, plugin: str, kind: str) -> Callable[..., None]:
    """The `register(name, target, description="", **options)` given to a plugin's hook for one kind."""

    def register(name: str, target: Any, description: str = "", **options: Any) -> None:
        component = Component(
            kind, name, target, str(description), plugin=plugin, dist=info.name, options=options
        )
        try:
            state.registry.add(component)
        except DuplicateComponentError as exc:
            state.registry.mark_conflict(exc)
            for other in state.plugins:
                if other.name in exc.dists and other is not info:
                    other.add_error(str(exc))
                    state.registry.broken.setdefault(other.name, str(exc))
            _fail(state, info, str(exc), exc)
            return
        except UnstableError as exc:  # a bad name or target: keep the plugin's other components
            _fail(state, info, str(exc), exc)
            return
        info.provides.setdefault(kind, []).append(name)
        info.descriptions[(kind, name)] = component.description or _doc_line(target)

    return register


def _alias_callback(
    state: PluginState, info: PluginInfo, plugin: str, kinds: tuple[str, ...]
) -> Callable[..., None]:
    """The callback of a hook kept for one release (`register_game_analyses`): its `kind=` picks which of
    `kinds` the component is registered as, as if through that kind's own hook."""
    by_kind = {kind: _register_callback(state, info, plugin, kind) for kind in kinds}

    def register(name: str, target: Any, description: str = "", kind: Any = None, **options: Any) -> None:
        if kind not in by_kind:
            allowed = " or ".join(repr(k) for k in kinds)
            _fail(state, info, f"{info.name}'s {name!r}: kind must be {allowed}, got {kind!r}")
            return
        if kind == "probe":  # that hook asked for no `check`: what it registered is adapted
            description = description or _doc_line(target)
            target = functools.partial(_LegacyProbe, target)
        by_kind[kind](name, target, description, **options)

    return register


class _LegacyProbe:
    """A probe registered through `register_game_analyses` as a `Probe`: its class built with no
    arguments, its `check` and `default_env` where it has them (that hook did not ask for them)."""

    def __init__(self, target: Any) -> None:
        self.probe = load_target(target)()
        self.default_env = getattr(self.probe, "default_env", None)

    def check(self, env_id: str) -> None:
        check = getattr(self.probe, "check", None)
        if check is not None:
            check(env_id)

    def __call__(self, policy: Any, env_id: str) -> Any:
        return self.probe(policy, env_id)


def _doc_line(target: Any) -> str:
    """A description for a component registered without one: its docstring's first paragraph (a lazy
    target is not imported for it)."""
    doc = None if isinstance(target, str) else getattr(target, "__doc__", None)
    return " ".join(doc.strip().split("\n\n")[0].split()) if doc and doc.strip() else ""


def add_commands(cli: Any) -> None:
    """Call each plugin's `register_commands(cli)` on its own; a failing one is recorded (raised if strict)."""
    state = get_state()
    for plugin_name, (info, module) in state.loaded.items():
        for impl in _impls(state.manager, "register_commands", module):
            try:
                _call(impl, cli=cli)
            except PluginLoadError:
                raise
            except Exception as exc:
                _fail(state, info, f"register_commands of {plugin_name!r} failed: {_one_line(exc)}", exc)


_state: PluginState | None = None
_lock = threading.Lock()


def get_state() -> PluginState:
    """The discovered plugins (discovered once per process; `reset()` forgets them)."""
    global _state
    with _lock:
        if _state is None:
            _state = discover()
        return _state


def reset() -> None:
    """Forget what was discovered, so the next call looks at the installed entry points again."""
    global _state
    with _lock:
        _state = None


def get_registry() -> Registry:
    """The registry of every component the built-ins and the loaded plugins provide."""
    return get_state().registry


def get_plugin_manager() -> pluggy.PluginManager:
    """The pluggy manager holding the built-ins and every plugin that loaded."""
    return get_state().manager


def list_plugins(include_builtins: bool = False) -> list[PluginInfo]:
    """The discovered distributions, in name order (the core's built-ins first, when included)."""
    return [p for p in get_state().plugins if include_builtins or not p.builtin]


def registered_name(kind: str, target: Any) -> str:
    """The name `target` (a class or factory) is registered under as a `kind`, for messages that speak the
    user's words (`cispo`, not `CISPOLearner`); its own name when no plugin registered it."""
    component = component_of(kind, target)
    if component is not None:
        return component.name
    return getattr(target, "__name__", getattr(target, "__qualname__", repr(target)))


def component_of(kind: str, target: Any) -> Component | None:
    """The component of `kind` registered as `target` (a class or factory), or None."""
    own = getattr(target, "__qualname__", getattr(target, "__name__", repr(target)))
    wanted = f"{getattr(target, '__module__', '?')}:{own}"
    for component in get_registry().by_kind(kind):
        if component.target is target or component.target_name == wanted:
            return component
    return None


def load(kind: str, name: str) -> Any:
    """Shortcut: the class or factory registered as `name` of `kind`."""
    return get_registry().load(kind, name)
