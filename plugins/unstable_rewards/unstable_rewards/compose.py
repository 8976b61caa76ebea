"""Chains of transforms of one stage, applied in order; each chain is itself a transform of that stage.

A chain's state is its members' states in order, each tagged with the member's class name, so a
resume with a different chain fails clearly instead of loading baselines into the wrong transform.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.rewards import (
    FinalRewardTransform,
    SamplingRewardTransform,
    StepRewardTransform,
    stage_of,
)
from unstable_core.types import Step, Trajectory


def _check_members(instance: Any, attribute: Any, value: Any) -> None:
    name, stage = type(instance).__name__, instance.stage
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{name}: transforms must be a list of {stage} transforms, got {value!r}")
    for t in value:
        if isinstance(t, type):
            raise ConfigError(
                f"{name} takes {stage} transform instances, got the class {t.__name__}: use {t.__name__}()"
            )
        try:
            t_stage = stage_of(t)
        except TypeError:
            raise ConfigError(
                f"{name} takes {stage} transform instances; {t!r} is not a reward transform"
            ) from None
        if t_stage != stage:
            raise ConfigError(f"{name} takes {stage} transform instances; {t!r} is a {t_stage} transform")


@attrs.define
class _Compose:
    """The shared state handling of the three chains."""

    stage: ClassVar[str] = ""

    transforms: list[Any] = attrs.field(factory=list, validator=_check_members)

    def state_dict(self) -> dict[str, Any]:
        """`{"transforms": [{"type": class name, "state": member state}, ...]}`, JSON-ready."""
        return {"transforms": [{"type": type(t).__name__, "state": t.state_dict()} for t in self.transforms]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore every member from `state_dict` output of a chain of the same classes."""
        name = type(self).__name__
        members = state.get("transforms") if isinstance(state, dict) else None
        expected = [type(t).__name__ for t in self.transforms]
        if not isinstance(members, list) or not all(isinstance(m, dict) for m in members):
            raise UnstableError(
                f"{name}: state must be {{'transforms': [...]}} as written by state_dict(), got {state!r}"
            )
        found = [m.get("type") for m in members]
        if found != expected:
            raise UnstableError(
                f"{name}: saved state is for the transforms {found}, this chain is {expected}; "
                "configure the same reward transforms as the run being resumed"
            )
        for t, m in zip(self.transforms, members, strict=True):
            t.load_state_dict(m.get("state", {}))


@attrs.define
class ComposeFinalRewardTransforms(_Compose, FinalRewardTransform):
    """Applies final reward transforms in order to a game's `{pid: reward}`."""

    stage: ClassVar[str] = "final"

    def __call__(self, rewards: dict[int, float], env_id: str | None = None) -> dict[int, float]:
        """The rewards after every member, in order."""
        for t in self.transforms:
            rewards = t(rewards, env_id)
        return dict(rewards)


@attrs.define
class ComposeStepRewardTransforms(_Compose, StepRewardTransform):
    """Applies step reward transforms in order to the reward of one step."""

    stage: ClassVar[str] = "step"

    def __call__(self, trajectory: Trajectory, step_index: int, reward: float) -> float:
        """The reward after every member, in order."""
        for t in self.transforms:
            reward = t(trajectory, step_index, reward)
        return float(reward)


@attrs.define
class ComposeSamplingRewardTransforms(_Compose, SamplingRewardTransform):
    """Applies sampling reward transforms in order to a batch of steps."""

    stage: ClassVar[str] = "sampling"

    def __call__(self, steps: list[Step]) -> list[Step]:
        """The batch after every member, in order."""
        for t in self.transforms:
            steps = t(steps)
        return list(steps)
