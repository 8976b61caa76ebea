"""Sampling reward transforms: normalise the rewards of the batch the learner is about to train on.

With mean mu and (population) standard deviation sigma of a bucket's rewards r_i:

    centred:  r_i - mu
    z-score:  (r_i - mu) / sigma

A bucket whose rewards are all equal (sigma < EPS, which includes a bucket of one step) normalises to
zeros: the reference divided by a zero sigma there and trained on NaN.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.rewards import SamplingRewardTransform
from unstable_core.types import Step
from unstable_rewards.checks import bool_arg, finite_reward

EPS = 1e-8
GROUP_KEYS = ("seed", "prompt")


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


def _normalize_buckets(rewards: list[float], keys: list[Any], z_score: bool) -> list[float]:
    """`normalize` applied within each bucket of equal keys; the result keeps the input's order."""
    buckets: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        buckets.setdefault(key, []).append(i)
    normalized = [0.0] * len(rewards)
    for indices in buckets.values():
        for i, r in zip(indices, normalize([rewards[i] for i in indices], z_score), strict=True):
            normalized[i] = r
    return normalized


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
        normalized = _normalize_buckets(_rewards(self, steps), [s.env_id for s in steps], self.z_score)
        return [attrs.evolve(s, reward=r) for s, r in zip(steps, normalized, strict=True)]


def _group_key(arg: str) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value not in GROUP_KEYS:
            raise ConfigError(
                f"{type(instance).__name__}: {attribute.name} must be one of {', '.join(GROUP_KEYS)}, got {value!r}"
            )

    return check


@attrs.define
class GroupRelative(SamplingRewardTransform):
    """GRPO's group-relative advantage: each step's reward minus the mean of its group (divided by the
    group's std when `z_score`). A group is the steps of one env id played from the same game seed by the
    same seat at the same turn (`by="seed"`), or the steps with identical prompt token ids (`by="prompt"`).
    A group of one, or one whose rewards are all equal, gets advantage 0: it has no baseline to compare with.
    Play each seed several times (the env sampler's `repeat`) so that groups exist."""

    by: str = attrs.field(default="seed", validator=_group_key("by"))
    z_score: bool = attrs.field(default=False, validator=bool_arg)  # Dr. GRPO: centring only, no std bias

    def key(self, step: Step) -> Any:
        """The group of a step."""
        if self.by == "prompt":
            return tuple(step.prompt_ids)
        if "seed" not in step.step_info:
            raise UnstableError(
                f"GroupRelative: step of game {step.game_idx}, player {step.pid}, turn {step.turn} "
                f"({step.env_id}) has no game seed in step_info; use group-relative:by=prompt"
            )
        return (step.env_id, step.step_info["seed"], step.pid, step.turn)

    def __call__(self, steps: list[Step]) -> list[Step]:
        """New steps (shallow copies, in the same order) whose rewards are normalised within their group."""
        normalized = _normalize_buckets(_rewards(self, steps), [self.key(s) for s in steps], self.z_score)
        return [attrs.evolve(s, reward=r) for s, r in zip(steps, normalized, strict=True)]
