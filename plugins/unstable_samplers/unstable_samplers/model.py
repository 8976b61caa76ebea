"""Opponent samplers: who the learner's current checkpoint plays against.

Each reads a `League` snapshot and returns a model uid. Inactive models (such as the registry's
dummy opponent of one-player games) are never chosen. Draws use the sampler's seeded `self.rng`.
"""

from __future__ import annotations

import math
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.league.league import League
from unstable_core.samplers import BaseModelSampler


def current_ckpt(registry: League, sampler: str) -> str:
    """The registry's current checkpoint, or an error saying that the learner has not registered one."""
    current = registry.get_current_ckpt()
    if current is None:
        raise UnstableError(
            f"{sampler}: the model registry has no checkpoint yet; register the base model with add_checkpoint first"
        )
    return current


class MirrorModelSampler(BaseModelSampler):
    """Self-play: the opponent is always the current checkpoint."""

    def sample_opponent(self, registry: League) -> str:
        """The uid of the current checkpoint."""
        return current_ckpt(registry, type(self).__name__)

    def adapters_in_play(self) -> int:
        return 1


class FixedOpponentModelSampler(BaseModelSampler):
    """Uniform over the registry's fixed opponents, plus the current checkpoint if `include_current_ckpt`."""

    def __init__(self, seed: int = 0, include_current_ckpt: bool = False, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        self.include_current_ckpt = bool(include_current_ckpt)

    def candidates(self, registry: League) -> list[str]:
        """The uids drawn from, each with equal probability (fixed opponents sorted by uid)."""
        fixed = sorted(uid for uid, m in registry.get_all_models().items() if m.kind == "fixed" and m.active)
        if not fixed:
            raise UnstableError(
                f"{type(self).__name__}: the registry has no fixed opponent; add one with --fixed-opponent NAME"
            )
        if self.include_current_ckpt:
            fixed.append(current_ckpt(registry, type(self).__name__))
        return fixed

    def sample_opponent(self, registry: League) -> str:
        """A uniformly drawn candidate."""
        return self.rng.choice(self.candidates(registry))

    def adapters_in_play(self) -> int:
        return 1  # the current checkpoint; the run counts fixed opponents that are adapter folders


class AsynchronousModelSampler(BaseModelSampler):
    """Lagged self-play: uniform over the last `k` checkpoints (by iteration), the current one included."""

    def __init__(self, seed: int = 0, k: int = 5, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UnstableError(f"AsynchronousModelSampler: k must be an integer >= 1, got {k!r}")
        self.k = k

    def candidates(self, registry: League) -> list[str]:
        """The uids of the newest `k` active checkpoints, oldest first."""
        models = registry.get_all_models()
        ckpts = [uid for uid in registry.checkpoint_uids() if models[uid].active]
        if not ckpts:
            raise UnstableError(
                f"{type(self).__name__}: the model registry has no checkpoint yet; "
                "register the base model with add_checkpoint first"
            )
        return ckpts[-self.k :]

    def sample_opponent(self, registry: League) -> str:
        """A uniformly drawn recent checkpoint."""
        return self.rng.choice(self.candidates(registry))

    def adapters_in_play(self) -> int:
        return self.k


class TrueSkillModelSampler(BaseModelSampler):
    """Opponents in proportion to TrueSkill's match quality with the current checkpoint: close, uncertain
    matches are played most. Candidates: every active model but the current checkpoint (unless it is alone)."""

    def probabilities(self, registry: League) -> dict[str, float]:
        """p(c) = quality(current, c) / sum_c' quality(current, c'), by candidate uid."""
        current = current_ckpt(registry, type(self).__name__)
        active = [uid for uid, m in registry.get_all_models().items() if m.active]
        candidates = [uid for uid in active if uid != current] or [current]
        qualities = {uid: registry.quality(current, uid) for uid in candidates}
        total = math.fsum(qualities.values())
        if total == 0.0:  # every quality underflowed: no candidate is a closer match than another
            return {uid: 1.0 / len(candidates) for uid in candidates}
        return {uid: q / total for uid, q in qualities.items()}

    def sample_opponent(self, registry: League) -> str:
        """A candidate drawn with the match-quality probabilities."""
        probs = self.probabilities(registry)
        return self.rng.choices(list(probs), weights=list(probs.values()))[0]
