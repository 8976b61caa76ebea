"""Sampling reward transforms: normalise the rewards of the batch the learner is about to train on.

With mean mu and (population) standard deviation sigma of a bucket's rewards r_i:

    centred:  r_i - mu
    z-score:  (r_i - mu) / sigma

A bucket whose rewards are all equal (sigma < EPS, which includes a bucket of one step) normalises to
zeros: the reference divided by a zero sigma there and trained on NaN.
"""

from __future__ import annotations

import math

import attrs

from unstable_core.rewards import SamplingRewardTransform
from unstable_core.types import Step
from unstable_rewards.checks import bool_arg, finite_reward

EPS = 1e-8


def normalize(rewards: list[float], z_score: bool) -> list[float]:
    """The centred (or z-scored) rewards of one bucket; zeros where the bucket has no spread."""
    n = len(rewards)
    if n == 0:
        return []
    mu = math.fsum(rewards) / n
    sigma = math.sqrt(math.fsum((r - mu) ** 2 for r in rewards) / n)
    if sigma < EPS:
        return [0.0] * n
    scale = sigma if z_score else 1.0
    return [(r - mu) / scale for r in rewards]


def _rewards(transform: SamplingRewardTransform, steps: list[Step]) -> list[float]:
    name = type(transform).__name__
    return [
        finite_reward(
            s.reward, f"{name}: step of game {s.game_idx}, player {s.pid}, turn {s.turn} ({s.env_id})"
        )
        for s in steps
    ]


@attrs.define
class NormalizeRewards(SamplingRewardTransform):
    """Mean-centres the batch's `Step.reward` (and divides by its std when `z_score`)."""

    z_score: bool = attrs.field(default=False, validator=bool_arg)

    def __call__(self, steps: list[Step]) -> list[Step]:
        """New steps (shallow copies, in the same order) whose rewards are normalised over the batch."""
        normalized = normalize(_rewards(self, steps), self.z_score)
        return [attrs.evolve(s, reward=r) for s, r in zip(steps, normalized, strict=True)]


@attrs.define
class NormalizeRewardsByEnv(SamplingRewardTransform):
    """Like `NormalizeRewards`, computed separately over the steps of each env id."""

    # the reference's class default; its build(), and our run default, z-score
    z_score: bool = attrs.field(default=False, validator=bool_arg)

    def __call__(self, steps: list[Step]) -> list[Step]:
        """New steps (shallow copies, in the same order) whose rewards are normalised within their env."""
        rewards = _rewards(self, steps)
        by_env: dict[str, list[int]] = {}
        for i, s in enumerate(steps):
            by_env.setdefault(s.env_id, []).append(i)
        normalized = [0.0] * len(steps)
        for indices in by_env.values():
            for i, r in zip(indices, normalize([rewards[i] for i in indices], self.z_score), strict=True):
                normalized[i] = r
        return [attrs.evolve(s, reward=r) for s, r in zip(steps, normalized, strict=True)]
