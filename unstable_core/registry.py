"""Named components by kind (learners, samplers, transforms, ...), with the plugin that provided them.

Targets may be objects or lazy `"module:Name"` strings; a string is imported only by `Component.load()`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import attrs

from unstable_core.errors import UnstableError

KINDS: dict[str, str] = {
    "learner": "register_learners",
    "env_sampler": "register_env_samplers",
    "model_sampler": "register_model_samplers",
    "reward_transform": "register_reward_transforms",
    "tracker": "register_trackers",
    "backend": "register_backends",
    "template": "register_templates",
}

# Names our own plugin distributions provide, so that asking for one that is not installed says
# which package to install.
KNOWN_PROVIDERS: dict[str, dict[str, str]] = {
    "learner": {"reinforce": "unstable-reinforce", "a2c": "unstable-a2c"},
    "env_sampler": {"random": "unstable-samplers", "adaptive": "unstable-samplers"},
    "model_sampler": {name: "unstable-samplers" for name in ("mirror", "fixed", "lagged", "trueskill")},
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
        )
    },
}

# Where the distributions of this repository live, for the install hint.
_LOCAL_PLUGIN_DIRS = {
    "unstable-reinforce": "plugins/unstable_reinforce",
    "unstable-a2c": "plugins/unstable_a2c",
    "unstable-samplers": "plugins/unstable_samplers",
    "unstable-rewards": "plugins/unstable_rewards",
}


class UnknownComponentError(UnstableError, LookupError):
    """A component name that no installed plugin provides."""


class DuplicateComponentError(UnstableError):
    """Two plugins registered the same name for the same kind."""

    def __init__(self, message: str, kind: str = "", name: str = "") -> None:
        super().__init__(message)
        self.kind, self.name = kind, name


def install_hint(dist: str) -> str:
    """How to install one of our plugin distributions (from PyPI, or from this repository)."""
    local = _LOCAL_PLUGIN_DIRS.get(dist)
    where = f" (or `pip install -e {local}` from a checkout of unstable)" if local else ""
    return f"pip install {dist}{where}"


def load_target(target: Any) -> Any:
    """Resolve a `"module:Name"` import string (or return a non-string target unchanged)."""
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    if not attr:
        raise UnstableError(f"import string {target!r} must look like 'package.module:Name'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@attrs.define
class Component:
    """One registered component, lazily importable."""

    kind: str
    name: str
    target: Any
    description: str = ""
    plugin: str = ""
    dist: str = ""

    def load(self) -> Any:
        """The class or factory itself (imports a lazy target on first use)."""
        if isinstance(self.target, str):
            self.target = load_target(self.target)
        return self.target

    @property
    def target_name(self) -> str:
        if isinstance(self.target, str):
            return self.target
        return f"{getattr(self.target, '__module__', '?')}:{getattr(self.target, '__qualname__', repr(self.target))}"


@attrs.define
class Registry:
    """Components by kind and name."""

    _items: dict[str, dict[str, Component]] = attrs.field(factory=lambda: {k: {} for k in KINDS})
    _conflicts: dict[tuple[str, str], str] = attrs.field(factory=dict)

    def add(self, component: Component) -> None:
        if component.kind not in self._items:
            raise UnstableError(f"unknown component kind {component.kind!r}; kinds are: {', '.join(KINDS)}")
        if not component.name or not isinstance(component.name, str):
            raise UnstableError(f"plugin {component.dist or component.plugin!r} registered a {component.kind} without a name")
        taken = self._items[component.kind].get(component.name)
        if taken is not None:
            raise DuplicateComponentError(
                f"{component.kind} {component.name!r} is registered twice: by {taken.dist or taken.plugin!r} "
                f"and by {component.dist or component.plugin!r}; uninstall one of the two distributions",
                kind=component.kind,
                name=component.name,
            )
        self._items[component.kind][component.name] = component

    def get(self, kind: str, name: str) -> Component:
        """The component, or an `UnknownComponentError` listing what is installed and what to install."""
        conflict = self._conflicts.get((kind, name))
        if conflict:
            raise DuplicateComponentError(conflict, kind=kind, name=name)
        found = self._items.get(kind, {}).get(name)
        if found is not None:
            return found
        installed = ", ".join(sorted(self._items.get(kind, {}))) or "none"
        label = kind.replace("_", " ")
        message = f"unknown {label} {name!r}; installed: {installed}"
        provider = KNOWN_PROVIDERS.get(kind, {}).get(name)
        if provider:
            message += f". {name!r} is provided by {provider}: {install_hint(provider)}"
        raise UnknownComponentError(message)

    def mark_conflict(self, error: DuplicateComponentError) -> None:
        """Remember a name two plugins claim: using it fails with the message naming both."""
        self._conflicts[(error.kind, error.name)] = str(error)

    def load(self, kind: str, name: str) -> Any:
        return self.get(kind, name).load()

    def names(self, kind: str) -> list[str]:
        return sorted(self._items.get(kind, {}))

    def by_kind(self, kind: str) -> list[Component]:
        return [self._items[kind][n] for n in self.names(kind)]

    def __iter__(self) -> Iterator[Component]:
        for kind in self._items:
            yield from self.by_kind(kind)
