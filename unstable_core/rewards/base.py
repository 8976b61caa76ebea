"""The three stages of reward shaping. Plugins (such as `unstable-rewards`) subclass these.

- final: once per game, on every seat's final reward (balance first-player advantage, baselines);
- step: once per step of a training trajectory (format bonus, invalid-move penalty);
- sampling: on a batch of steps right before the learner gets it (normalisation).

Transforms that keep statistics (EMA baselines) expose them with `state_dict` so a run can resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from unstable_core.types import Step, Trajectory


class _Stateful:
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready statistics to save with a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


class FinalRewardTransform(_Stateful):
    """Maps the final rewards of all seats of one game, `{pid: reward}`, to new ones."""

    def __call__(self, rewards: dict[int, float], env_id: str | None = None) -> dict[int, float]:
        raise NotImplementedError


class StepRewardTransform(_Stateful):
    """Maps the reward of step `step_index` of a trajectory to a new one."""

    def __call__(self, trajectory: Trajectory, step_index: int, reward: float) -> float:
        raise NotImplementedError


class SamplingRewardTransform(_Stateful):
    """Maps a batch of steps to the batch the learner trains on (setting each `Step.reward`)."""

    def __call__(self, steps: list[Step]) -> list[Step]:
        raise NotImplementedError


STAGES: dict[str, type] = {
    "final": FinalRewardTransform,
    "step": StepRewardTransform,
    "sampling": SamplingRewardTransform,
}


def stage_of(transform: Any) -> str:
    """'final', 'step' or 'sampling', by the base class a transform (class or instance) derives from."""
    cls = transform if isinstance(transform, type) else type(transform)
    for stage, base in STAGES.items():
        if issubclass(cls, base):
            return stage
    raise TypeError(
        f"{cls.__name__} is not a reward transform: subclass one of {', '.join(b.__name__ for b in STAGES.values())}"
    )


def check_stage(transforms: Sequence[Any], stage: str) -> None:
    for t in transforms:
        if stage_of(t) != stage:
            raise TypeError(f"{type(t).__name__} is a {stage_of(t)} transform, not a {stage} transform")
