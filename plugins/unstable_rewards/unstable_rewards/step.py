"""Step reward transforms: dense shaping from what each turn's step records (format, move validity)."""

from __future__ import annotations

import attrs

from unstable_core.errors import UnstableError
from unstable_core.rewards import StepRewardTransform
from unstable_core.types import Step, Trajectory
from unstable_rewards.checks import finite_arg, finite_reward


def _step_at(transform: StepRewardTransform, trajectory: Trajectory, step_index: int) -> Step:
    """Step `step_index` of the trajectory, or an UnstableError naming the bad index."""
    n = len(trajectory.steps)
    if isinstance(step_index, bool) or not isinstance(step_index, int) or not 0 <= step_index < n:
        raise UnstableError(
            f"{type(transform).__name__}: step_index must be an int in [0, {n}) for this trajectory "
            f"of {n} steps, got {step_index!r}"
        )
    return trajectory.steps[step_index]


@attrs.define
class RewardForFormat(StepRewardTransform):
    """Adds `reward` to a step whose answer had the expected format (`step.format_ok`), else `penalty`."""

    # UnstableBaselines v0.2's class defaults; its build(), and our run default, use reward=1.5, penalty=0
    reward: float = attrs.field(default=0.0, validator=finite_arg)
    penalty: float = attrs.field(default=0.0, validator=finite_arg)

    def __call__(self, trajectory: Trajectory, step_index: int, reward: float) -> float:
        """The step's reward plus the format bonus or penalty."""
        step = _step_at(self, trajectory, step_index)
        r = finite_reward(reward, f"RewardForFormat: step {step_index}")
        return r + (self.reward if step.format_ok else self.penalty)


@attrs.define
class PenaltyForInvalidMove(StepRewardTransform):
    """Adds `penalty` to a step the environment marked invalid (`step.invalid_move`), else `reward`."""

    reward: float = attrs.field(default=0.0, validator=finite_arg)
    # UnstableBaselines v0.2's class default was 0 (a bare transform did nothing); its build(), and our run
    # default, use reward=1, penalty=-1.
    penalty: float = attrs.field(default=-1.0, validator=finite_arg)

    def __call__(self, trajectory: Trajectory, step_index: int, reward: float) -> float:
        """The step's reward plus the invalid-move penalty or the valid-move reward."""
        step = _step_at(self, trajectory, step_index)
        r = finite_reward(reward, f"PenaltyForInvalidMove: step {step_index}")
        return r + (self.penalty if step.invalid_move else self.reward)


@attrs.define
class EntropyBonus(StepRewardTransform):
    """Adds `tau` x the surprisal of a valid move, -log mu(completion) (the sampling log-probs the step
    recorded): the reward of entropy-regularised policy gradient, E[R] + tau H(pi), whose gradient keeps a
    policy that is still choosing from collapsing onto one move (self-play converges towards a regularised
    equilibrium instead of cycling). Invalid or unformatted answers get nothing: rewarding their surprisal
    would reward noise. Scripted and API seats record no log-probs and get nothing."""

    tau: float = attrs.field(default=0.1, validator=finite_arg)

    def __call__(self, trajectory: Trajectory, step_index: int, reward: float) -> float:
        """The step's reward plus tau x its move's surprisal."""
        step = _step_at(self, trajectory, step_index)
        r = finite_reward(reward, f"EntropyBonus: step {step_index}")
        if step.invalid_move or not step.format_ok or not step.logprobs:
            return r
        return r - self.tau * sum(step.logprobs)
