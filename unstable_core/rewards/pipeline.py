"""Reward shaping, the stage of the data path between played turns and the learner's batches:

    game turn -> Step -> rewards (here) -> buffer -> batch -> learner

`RewardPipeline` runs the three stages in order: the final transforms once per game, on the outcomes of the
collected (training) seats; the step transforms on every step of those seats; the sampling transforms on
each batch the buffer serves. A transform that raises or returns a non-finite reward stops the run.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.rewards.base import (
    STAGES,
    FinalRewardTransform,
    SamplingRewardTransform,
    StepRewardTransform,
)
from unstable_core.types import GameResult, Step, Trajectory


def _call(transform: Any, stage: str, *args: Any) -> Any:
    """`transform(*args)`, with its exception turned into one line naming it (the run stops)."""
    try:
        return transform(*args)
    except UnstableError:
        raise
    except Exception as exc:
        raise UnstableError(
            f"{stage} reward transform {type(transform).__name__} raised {type(exc).__name__}: {exc}"
        ) from exc


def _finite(value: Any, transform: Any, stage: str, where: str) -> Any:
    """A transform's reward must be a finite number: a NaN would make every update a no-op."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UnstableError(
            f"{stage} reward transform {type(transform).__name__} returned {value!r} for {where}: reward "
            "transforms must return finite numbers; fix the transform or drop it"
        )
    return value


@attrs.define
class RewardPipeline:
    """The final, step and sampling reward transforms of a run, applied in that order."""

    final: list[FinalRewardTransform] = attrs.field(factory=list, converter=list)
    step: list[StepRewardTransform] = attrs.field(factory=list, converter=list)
    sampling: list[SamplingRewardTransform] = attrs.field(factory=list, converter=list)

    def shape_game(self, result: GameResult) -> list[Trajectory]:
        """Training trajectories of a game with `final_reward`, `shaping` and `reward` set on every step.

        The final transforms see the outcomes of the collected (training) seats only: a baseline per seat
        must not move with a fixed opponent's results (UnstableBaselines v0.2 tracked the learner's seat
        only)."""
        trajectories = result.training_trajectories
        collected = {t.pid for t in trajectories}
        rewards = {int(k): float(v) for k, v in result.info.final_rewards.items() if int(k) in collected}
        env_id = result.info.env_id
        for t in self.final:
            rewards = _call(t, "final", rewards, env_id)
            for pid, r in rewards.items():
                _finite(r, t, "final", f"seat {pid} of a game of {env_id}")
        for traj in trajectories:
            traj.final_reward = rewards.get(traj.pid, 0.0)
            for i, s in enumerate(traj.steps):
                s.final_reward = traj.final_reward
                r = traj.final_reward
                for t in self.step:
                    r = _finite(_call(t, "step", traj, i, r), t, "step", f"step {i}")
                s.reward = float(r)
                s.shaping = s.reward - s.final_reward
        return trajectories

    def shape_batch(self, steps: list[Step]) -> list[Step]:
        """The batch the learner trains on: `steps` through the sampling transforms."""
        for t in self.sampling:
            steps = _call(t, "sampling", steps)
            for s in steps:
                _finite(s.reward, t, "sampling", "a step of the batch")
        return steps

    def state_dict(self) -> dict[str, Any]:
        """Every transform's statistics (EMA baselines) by stage, to save with a checkpoint."""
        return {stage: [t.state_dict() for t in getattr(self, stage)] for stage in STAGES}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, transform by transform in each stage's order."""
        for stage in STAGES:
            for t, s in zip(getattr(self, stage), state.get(stage, []), strict=False):
                t.load_state_dict(s)
