"""A probe on a policy (`measure`): the probe of a name, checked against its env (`probe_of`), the envs it
covers (`probe_envs`) and the registered probes (`probe_names`). On a model, a checkpoint or the players of an
evaluation: `unstable_core.eval.probes`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from unstable_core.envs.catalogue import check_env_id
from unstable_core.errors import ConfigError
from unstable_core.games.analysis.catalogue import PROBE, analyses, check_supported, supports
from unstable_core.games.analysis.probe import Policy, ProbeResult


def probe_of(name: str, env_id: str | None = None) -> tuple[Any, str]:
    """(the probe `name`, the env it measures: `env_id`, else the probe's default), after its checks: an
    unknown name, an env it does not cover or a missing requirement is one ConfigError line."""
    component = check_supported(PROBE, name, [env_id] if env_id else [])
    probe = component.load()()
    env_id = env_id or getattr(probe, "default_env", None)
    if not env_id:
        raise ConfigError(f"probe {name!r} has no default env; give one")
    check_env_id(env_id, 2, f"probe {name!r}: env")
    check_supported(PROBE, name, [env_id])
    check = getattr(probe, "check", None)
    if check is not None:
        check(env_id)
    return probe, env_id


def measure(name: str, policy: Policy, env_id: str | None = None) -> ProbeResult:
    """The probe `name` on `policy` in `env_id` (default: the probe's), with its wall time."""
    probe, env_id = probe_of(name, env_id)
    started = time.perf_counter()
    result = probe(policy, env_id)
    result.wall_s = time.perf_counter() - started
    return result


def probe_envs(name: str, envs: Sequence[str]) -> list[str]:
    """The envs of `envs` the probe `name` covers; its default env when `envs` is empty; a ConfigError
    listing the probes when it covers none of them."""
    component = check_supported(PROBE, name, [])
    covered = [e for e in envs if supports(component, e)]
    if envs and not covered:
        check_supported(PROBE, name, envs[:1])  # raises, naming the env and the known probes
    return covered or [probe_of(name)[1]]


def probe_names() -> list[str]:
    """The registered probes."""
    return [c.name for c in analyses(PROBE)]
