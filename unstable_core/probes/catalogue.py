"""The probes plugins registered (`register_probes`), asked for as `NAME` or `NAME:ENV` (`unstable eval
--probe`, `unstable run --eval-probe`): each value parsed once (`AskedProbe`), then resolved and checked
once, when the run or evaluation is planned (`plan_probes`): its name, the env it measures, what it needs
there. What is planned (`PlannedProbe`) is measured as it is, with no second look-up."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from unstable_core.envs.catalogue import check_env_id
from unstable_core.errors import ConfigError, UnstableError
from unstable_core.games.coverage import covering, covers, registered
from unstable_core.probes.base import Probe
from unstable_core.registry import Component

PROBE = "probe"


@attrs.frozen
class AskedProbe:
    """A probe as the command line asks for it: `NAME` (on the envs it covers, else its default env) or
    `NAME:ENV`."""

    name: str
    env_id: str | None = None

    @classmethod
    def parse(cls, value: str) -> AskedProbe:
        """`NAME` or `NAME:ENV`; a ConfigError for an empty name or env."""
        name, colon, env = str(value).partition(":")
        if not name or (colon and not env):
            raise ConfigError(f"{value!r} is no probe: give NAME or NAME:ENV")
        return cls(name, env or None)

    def __str__(self) -> str:
        return f"{self.name}:{self.env_id}" if self.env_id else self.name


@attrs.frozen
class PlannedProbe:
    """A probe resolved and checked for one env: its registered component and the instance built from it
    (with no arguments), measured as planned (`measuring.measure`)."""

    name: str
    env_id: str
    component: Component = attrs.field(eq=False, repr=False)
    probe: Probe = attrs.field(eq=False, repr=False)

    def to_dict(self) -> dict[str, str]:
        return {"probe": self.name, "env_id": self.env_id}

    def __str__(self) -> str:
        return f"{self.name} ({self.env_id})"


def probe_names() -> list[str]:
    """The registered probes."""
    return [c.name for c in registered(PROBE)]


def plan_probes(
    values: Iterable[str | AskedProbe], envs: Sequence[str] = (), option: str = ""
) -> list[PlannedProbe]:
    """Each asked probe on its envs, resolved and checked once: `NAME:ENV` on ENV; `NAME` on each of `envs`
    it covers, or on its default env when `envs` is empty. An unknown probe, an env it does not cover, an
    env that is no two-player game or what the probe lacks there (OpenSpiel) is one ConfigError line (that
    starts with the command line's `option` and the value, when given); a probe asked twice is planned
    once."""
    planned: dict[tuple[str, str], PlannedProbe] = {}
    for value in values:
        asked = value if isinstance(value, AskedProbe) else AskedProbe.parse(value)
        try:
            for probe in _resolve(asked, list(envs)):
                planned.setdefault((probe.name, probe.env_id), probe)
        except ConfigError as exc:
            if not option:
                raise
            raise ConfigError(f"{option} {asked}: {exc}") from None
    return list(planned.values())


def _resolve(asked: AskedProbe, envs: list[str]) -> list[PlannedProbe]:
    component = covering(PROBE, asked.name, [asked.env_id] if asked.env_id else [])
    probe = built(component)
    env_ids = [asked.env_id] if asked.env_id else [e for e in envs if covers(component, e)]
    if envs and not env_ids:
        covering(PROBE, asked.name, envs[:1])  # raises, naming the env and what the probe covers
    if not env_ids:
        if not probe.default_env:
            raise ConfigError(f"probe {asked.name!r} has no default env; give one as {asked.name}:ENV")
        env_ids = [probe.default_env]
    out = []
    for env_id in env_ids:
        check_env_id(env_id, 2, f"probe {asked.name!r}: env")
        covering(PROBE, asked.name, [env_id])
        _run_check(component, probe, env_id)
        out.append(PlannedProbe(asked.name, env_id, component, probe))
    return out


def built(component: Component) -> Probe:
    """The probe a registered class builds with no arguments, checked to implement `Probe`."""
    try:
        probe = component.load()()
    except UnstableError:
        raise
    except Exception as exc:
        raise component.failed(exc) from exc
    missing = [m for m in ("default_env", "check", "__call__") if not hasattr(probe, m)]
    if missing:
        raise ConfigError(
            f"probe {component.name!r} of {component.provider}: {type(probe).__name__} has no "
            f"{', '.join(missing)}; a probe implements unstable_core.probes.Probe (default_env, "
            "check(env_id), __call__(policy, env_id))"
        )
    return probe


def _run_check(component: Component, probe: Any, env_id: str) -> None:
    """The probe's own check of `env_id`: its ConfigError as it is, anything else naming the probe."""
    try:
        probe.check(env_id)
    except UnstableError:
        raise
    except Exception as exc:
        raise component.failed(exc) from exc
