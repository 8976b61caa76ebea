"""Plugin discovery: entry points of the group `unstable`, loaded one by one, into one `Registry`.

- Every entry point is loaded on its own; an import failure is kept on that plugin's `PluginInfo`
  (and re-raised when `UNSTABLE_STRICT_PLUGINS=1`), and every other plugin still works.
- `UNSTABLE_LOAD_PLUGINS=dist1,dist2` loads only those distributions; an empty value loads none.
- The core's built-ins are registered through the same hooks, as the plugin `unstable-core`.
"""

from __future__ import annotations

import os
import threading
from importlib import metadata
from typing import Any

import attrs
import pluggy

from unstable_core import hookspecs
from unstable_core.errors import UnstableError
from unstable_core.registry import KINDS, Component, DuplicateComponentError, Registry

ENTRY_POINT_GROUP = "unstable"
CORE_DIST = "unstable-core"


@attrs.define
class PluginInfo:
    """What one distribution's plugin provided, or the error that stopped it."""

    name: str
    version: str
    hooks: list[str] = attrs.field(factory=list)
    provides: dict[str, list[str]] = attrs.field(factory=dict)
    error: str | None = None
    builtin: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "version": self.version, "hooks": self.hooks, "provides": self.provides}
        if self.error:
            data["error"] = self.error
        return data


def normalize_dist(name: str) -> str:
    """PEP 503 normalisation, so `unstable_rewards` and `Unstable-Rewards` name one distribution."""
    return name.lower().replace("_", "-").replace(".", "-")


def _strict() -> bool:
    return os.environ.get("UNSTABLE_STRICT_PLUGINS", "") not in ("", "0", "false")


def _allowed_dists() -> set[str] | None:
    """None: load every plugin; otherwise the normalised names of the distributions to load."""
    value = os.environ.get("UNSTABLE_LOAD_PLUGINS")
    if value is None:
        return None
    return {normalize_dist(v.strip()) for v in value.split(",") if v.strip()}


def _core_version() -> str:
    try:
        return metadata.version(CORE_DIST)
    except metadata.PackageNotFoundError:
        return "0+unknown"


@attrs.define
class PluginState:
    """The plugin manager, the registry it filled, and one `PluginInfo` per plugin."""

    manager: pluggy.PluginManager
    registry: Registry
    plugins: list[PluginInfo]


def _unknown_hooks(module: Any) -> list[str]:
    """Names of functions marked `@hookimpl` that match no hook spec (typos such as `register_learner`)."""
    marker = f"{hookspecs.PROJECT_NAME}_impl"
    return sorted(
        name
        for name in dir(module)
        if hasattr(getattr(module, name, None), marker) and not hasattr(hookspecs, name)
    )


def _register_hooks(state: PluginState, module: Any, info: PluginInfo) -> None:
    """Call one plugin's registration hooks, filling the registry with its components."""
    state.manager.register(module, name=info.name)
    marker = f"{hookspecs.PROJECT_NAME}_impl"
    all_hooks = [*KINDS.values(), "register_commands"]
    info.hooks = [h for h in all_hooks if hasattr(getattr(module, h, None), marker)]
    errors = []
    unknown = _unknown_hooks(module)
    if unknown:
        errors.append(f"unknown hook(s) {', '.join(unknown)}; the hooks are: {', '.join(all_hooks)}")
    for kind, hook_name in KINDS.items():
        if hook_name not in info.hooks:
            continue
        fn = getattr(module, hook_name)

        def register(name: str, target: Any, description: str = "", _kind: str = kind) -> None:
            state.registry.add(Component(_kind, name, target, description, plugin=info.name, dist=info.name))
            info.provides.setdefault(_kind, []).append(name)

        try:
            fn(register=register)
        except DuplicateComponentError as exc:
            errors.append(str(exc))
            state.registry.mark_conflict(exc)
            if _strict():
                raise
        except Exception as exc:  # a broken plugin must not take the others down
            errors.append(f"{hook_name} failed: {type(exc).__name__}: {exc}")
            if _strict():
                raise
    if errors:
        info.error = "; ".join(errors)


def discover() -> PluginState:
    """Load the built-ins and every allowed entry point of the group `unstable`."""
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    state = PluginState(manager=manager, registry=Registry(), plugins=[])

    from unstable_core import builtins

    core = PluginInfo(name=CORE_DIST, version=_core_version(), builtin=True)
    _register_hooks(state, builtins, core)
    state.plugins.append(core)

    allowed = _allowed_dists()
    seen: set[str] = set()
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.dist.name if e.dist else "", e.name)):
        dist_name = normalize_dist(ep.dist.name) if ep.dist else ep.name
        if allowed is not None and dist_name not in allowed:
            continue
        key = f"{dist_name}:{ep.name}"
        if key in seen:  # the same distribution seen twice on sys.path
            continue
        seen.add(key)
        info = PluginInfo(name=dist_name, version=ep.dist.version if ep.dist else "?")
        state.plugins.append(info)
        try:
            module = ep.load()
        except Exception as exc:
            info.error = f"could not import {ep.value!r}: {type(exc).__name__}: {exc}"
            if _strict():
                raise UnstableError(f"plugin {dist_name}: {info.error}") from exc
            continue
        _register_hooks(state, module, info)
    return state


_state: PluginState | None = None
_lock = threading.Lock()


def get_state() -> PluginState:
    """The discovered plugins (discovered once per process)."""
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
    return get_state().registry


def get_plugin_manager() -> pluggy.PluginManager:
    return get_state().manager


def list_plugins(include_builtins: bool = False) -> list[PluginInfo]:
    return [p for p in get_state().plugins if include_builtins or not p.builtin]


def load(kind: str, name: str) -> Any:
    """Shortcut: the class or factory registered as `name` of `kind`."""
    return get_registry().load(kind, name)
