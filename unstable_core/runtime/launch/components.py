"""What a run config names, resolved through the plugin registry: the learner, the samplers, the reward
transforms and the trackers (an unknown name or a bad option fails here, before Ray starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import RunConfig, parse_transform
from unstable_core.errors import ConfigError
from unstable_core.plugins import get_registry
from unstable_core.rewards.base import check_stage
from unstable_core.runtime.launch.plugin_options import construct
from unstable_core.runtime.launch.preflight import check_trackers


def instantiate(kind: str, spec: Any, flag: str | None = None) -> Any:
    """Build a registered component from `name` or `name:key=value,...` (or a TOML table); what its
    constructor refuses is one ConfigError line naming `flag` (default: the kind), the name and its keys."""
    name, params = parse_transform(spec)
    cls = get_registry().load(kind, name)
    return construct(flag or kind.replace("_", " "), name, cls, params)


@attrs.define
class Components:
    """What a run config names, resolved through the plugin registry (errors surface before Ray starts)."""

    learner: Any
    env_sampler: Any
    model_sampler: Any
    final: list[Any]
    step: list[Any]
    sampling: list[Any]
    trackers: list[Any]

    @classmethod
    def none(cls) -> Components:
        """No components: a plan that plays a fixed schedule samples nothing and learns nothing."""
        return cls(None, None, None, [], [], [], [])

    @classmethod
    def resolve(cls, cfg: RunConfig, run_dir: Path, learner: bool = True) -> Components:
        reg = get_registry()
        reg.get("backend", cfg.backend)
        transforms = {}
        for stage in ("final", "step", "sampling"):
            transforms[stage] = [
                instantiate("reward_transform", t, f"--{stage}-transform")
                for t in getattr(cfg, f"{stage}_transforms")
            ]
            for spec, transform in zip(getattr(cfg, f"{stage}_transforms"), transforms[stage], strict=True):
                try:
                    check_stage([transform], stage)
                except TypeError as exc:
                    name = parse_transform(spec)[0]
                    raise ConfigError(
                        f"--{stage}-transform {name}: {exc}; give it with its own stage's option"
                    ) from None
        trackers = []
        for name in cfg.trackers:
            tracker_cls = reg.load("tracker", name)
            check_trackers([(name, tracker_cls)])
            extra = {"project": cfg.wandb_project} if name == "wandb" else {}
            trackers.append(
                (
                    tracker_cls,
                    {"run_dir": str(run_dir), "run_name": run_dir.name, "config": cfg.to_dict(), **extra},
                )
            )
        return cls(
            learner=reg.load("learner", cfg.learner) if learner else None,
            env_sampler=reg.load("env_sampler", cfg.env_sampler),
            model_sampler=reg.load("model_sampler", cfg.sampler),
            trackers=trackers,
            **transforms,
        )
