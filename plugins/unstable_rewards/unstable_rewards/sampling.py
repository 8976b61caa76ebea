"""Sampling reward transforms: normalise the rewards of the batch the learner is about to train on.

With mean mu and (population) standard deviation sigma of a bucket's rewards r_i:

    centred:  r_i - mu
    z-score:  (r_i - mu) / sigma

A bucket whose rewards are all equal (sigma < EPS, which includes a bucket of one step) normalises to
zeros: UnstableBaselines v0.2 divided by a zero sigma there and trained on NaN.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from unstable_core.errors import ConfigError
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

    # UnstableBaselines v0.2's class default; its build(), and our run default, z-score
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
    """GRPO's group-relative advantage.

    `by="seed"`: a group is the G games of one start (the env sampler's `repeat`: same env, seed, seats,
    opponents and checkpoint; `Step.group_id`), per seat. Each trajectory's outcome (`Step.final_reward`)
    is compared with the mean over the group's trajectories, each counted once whatever its length (divided
    by their std when `z_score`), and each step keeps its own shaping (`Step.shaping`, not accumulated):

        A_{i,t} = (R_i - mean_j R_j) [/ std_j R_j] + shaping_{i,t}

    The buffer serves whole groups, so a batch never cuts one. A trajectory outside any group (repeat = 1)
    is a group of one: its outcome gets advantage 0 (nothing to compare with), its steps only their shaping.

    `by="prompt"`: the steps of the batch with identical prompt token ids form a group, and each step's
    reward is centred (or z-scored) within it (states met in several games of the batch)."""

    by: str = attrs.field(default="seed", validator=_group_key("by"))
    z_score: bool = attrs.field(default=False, validator=bool_arg)  # Dr. GRPO: centring only, no std bias

    def __call__(self, steps: list[Step]) -> list[Step]:
        """New steps (shallow copies, in the same order) with their group-relative rewards."""
        rewards = _rewards(self, steps)
        if self.by == "prompt":
            normalized = _normalize_buckets(rewards, [tuple(s.prompt_ids) for s in steps], self.z_score)
            return [attrs.evolve(s, reward=r) for s, r in zip(steps, normalized, strict=True)]
        outcomes: dict[tuple[int, int], float] = {}  # trajectory (game, seat) -> its outcome, once
        for s in steps:
            outcomes[(s.game_idx, s.pid)] = finite_reward(
                s.final_reward, f"GroupRelative: outcome of game {s.game_idx}, player {s.pid}"
            )
        trajectories = list(outcomes)
        group_of = {(s.game_idx, s.pid): (s.group_id or f"game {s.game_idx}", s.pid) for s in steps}
        relative = _normalize_buckets(
            [outcomes[t] for t in trajectories], [group_of[t] for t in trajectories], self.z_score
        )
        advantage = dict(zip(trajectories, relative, strict=True))
        return [attrs.evolve(s, reward=advantage[(s.game_idx, s.pid)] + s.shaping) for s in steps]
