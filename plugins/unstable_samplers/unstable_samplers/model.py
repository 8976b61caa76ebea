"""Opponent samplers: who the learner's current checkpoint plays against.

Each reads a `League` snapshot and returns a model uid. Inactive models (such as the league's
dummy opponent of one-player games) are never chosen. Draws use the sampler's seeded `self.rng`.
"""

from __future__ import annotations

import math
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.league.league import League
from unstable_core.samplers import BaseModelSampler
from unstable_core.types import GameInformation


def current_ckpt(league: League, sampler: str) -> str:
    """The league's current checkpoint, or an error saying that the learner has not registered one."""
    current = league.get_current_ckpt()
    if current is None:
        raise UnstableError(
            f"{sampler}: the league has no checkpoint yet; register the base model with add_checkpoint first"
        )
    return current


class MirrorModelSampler(BaseModelSampler):
    """Self-play: the opponent is always the current checkpoint."""

    def sample_opponent(self, league: League) -> str:
        """The uid of the current checkpoint."""
        return current_ckpt(league, type(self).__name__)

    def adapters_in_play(self) -> int:
        return 1


class FixedOpponentModelSampler(BaseModelSampler):
    """Uniform over the league's fixed opponents, plus the current checkpoint if `include_current_ckpt`."""

    def __init__(self, seed: int = 0, include_current_ckpt: bool = False, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        self.include_current_ckpt = bool(include_current_ckpt)

    def candidates(self, league: League) -> list[str]:
        """The uids drawn from, each with equal probability (fixed opponents sorted by uid)."""
        fixed = sorted(uid for uid, m in league.get_all_models().items() if m.kind == "fixed" and m.active)
        if not fixed:
            raise UnstableError(
                f"{type(self).__name__}: the league has no fixed opponent; add one with --fixed-opponent NAME"
            )
        if self.include_current_ckpt:
            fixed.append(current_ckpt(league, type(self).__name__))
        return fixed

    def sample_opponent(self, league: League) -> str:
        """A uniformly drawn candidate."""
        return self.rng.choice(self.candidates(league))

    def adapters_in_play(self) -> int:
        return 1  # the current checkpoint; the run counts fixed opponents that are adapter folders


class AsynchronousModelSampler(BaseModelSampler):
    """Lagged self-play: uniform over the last `k` checkpoints (by iteration), the current one included."""

    def __init__(self, seed: int = 0, k: int = 5, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UnstableError(f"AsynchronousModelSampler: k must be an integer >= 1, got {k!r}")
        self.k = k

    def candidates(self, league: League) -> list[str]:
        """The uids of the newest `k` active checkpoints, oldest first."""
        models = league.get_all_models()
        ckpts = [uid for uid in league.checkpoint_uids() if models[uid].active]
        if not ckpts:
            raise UnstableError(
                f"{type(self).__name__}: the league has no checkpoint yet; "
                "register the base model with add_checkpoint first"
            )
        return ckpts[-self.k :]

    def sample_opponent(self, league: League) -> str:
        """A uniformly drawn recent checkpoint."""
        return self.rng.choice(self.candidates(league))

    def adapters_in_play(self) -> int:
        return self.k


class TrueSkillModelSampler(BaseModelSampler):
    """Opponents in proportion to TrueSkill's match quality with the current checkpoint: close, uncertain
    matches are played most. Candidates: every active model but the current checkpoint (unless it is alone)."""

    def probabilities(self, league: League) -> dict[str, float]:
        """p(c) = quality(current, c) / sum_c' quality(current, c'), by candidate uid."""
        current = current_ckpt(league, type(self).__name__)
        active = [uid for uid, m in league.get_all_models().items() if m.active]
        candidates = [uid for uid in active if uid != current] or [current]
        qualities = {uid: league.quality(current, uid) for uid in candidates}
        total = math.fsum(qualities.values())
        if total == 0.0:  # every quality underflowed: no candidate is a closer match than another
            return {uid: 1.0 / len(candidates) for uid in candidates}
        return {uid: q / total for uid, q in qualities.items()}

    def sample_opponent(self, league: League) -> str:
        """A candidate drawn with the match-quality probabilities."""
        probs = self.probabilities(league)
        return self.rng.choices(list(probs), weights=list(probs.values()))[0]


def _in_range(sampler: str, name: str, value: Any, lo: float, hi: float, integer: bool = False) -> Any:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not lo <= value <= hi:
        what = "an integer" if integer else "a number"
        raise UnstableError(f"{sampler}: {name} must be {what} in [{lo:g}, {hi:g}], got {value!r}")
    return value


class WinRateModelSampler(BaseModelSampler):
    """Opponents the learner beats about `target` of the time (as UnstableBaselines 0.3's win-rate sampler):
    p(c) = exp(-|w(c) - target| / temperature) / Z, where w(c) = (S + 1) / (n + 2) is the learner's smoothed
    score against candidate c over its last `window` training games with c (S: wins + draws / 2), so an
    opponent not played yet counts as 0.5. Candidates: the active fixed opponents and the newest `k`
    checkpoints but the current one (the current one alone when there is nothing else)."""

    def __init__(
        self,
        seed: int = 0,
        target: float = 0.5,
        temperature: float = 0.1,
        window: int = 32,
        k: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(seed, **kwargs)
        name = type(self).__name__
        self.target = float(_in_range(name, "target", target, 0.0, 1.0))
        self.temperature = float(_in_range(name, "temperature", temperature, 1e-6, 1e6))
        self.window = _in_range(name, "window", window, 1, 10**6, integer=True)
        self.k = _in_range(name, "k", k, 1, 10**6, integer=True)
        self.scores: dict[str, list[float]] = {}  # opponent uid -> the learner's last `window` scores

    def candidates(self, league: League) -> list[str]:
        """Active fixed opponents (by uid), then the newest `k` active checkpoints other than the current."""
        current = current_ckpt(league, type(self).__name__)
        models = league.get_all_models()
        fixed = sorted(uid for uid, m in models.items() if m.kind == "fixed" and m.active)
        ckpts = [uid for uid in league.checkpoint_uids() if models[uid].active and uid != current]
        return fixed + ckpts[-self.k :] or [current]

    def win_rate(self, uid: str) -> float:
        """w(c): the learner's smoothed recent score against `uid` (0.5 before any game)."""
        scores = self.scores.get(uid, [])
        return (math.fsum(scores) + 1.0) / (len(scores) + 2.0)

    def probabilities(self, league: League) -> dict[str, float]:
        """p(c) by candidate uid (see the class docstring)."""
        weights = {
            uid: math.exp(-abs(self.win_rate(uid) - self.target) / self.temperature)
            for uid in self.candidates(league)
        }
        total = math.fsum(weights.values())
        return {uid: w / total for uid, w in weights.items()}

    def sample_opponent(self, league: League) -> str:
        """A candidate drawn with `probabilities`."""
        probs = self.probabilities(league)
        return self.rng.choices(list(probs), weights=list(probs.values()))[0]

    def update(self, info: GameInformation) -> None:
        """Record the learner's score (win 1, draw 1/2, loss 0) against each other model of a finished
        training game; evaluation games, failed games and self-play against its own seats are left out."""
        if info.eval or info.failed or not info.learner_pids:
            return
        rewards = {int(pid): float(r) for pid, r in info.final_rewards.items()}
        mine = [rewards[pid] for pid in info.learner_pids if pid in rewards]
        for pid, uid in info.models.items():
            if int(pid) in info.learner_pids or int(pid) not in rewards or not mine:
                continue
            theirs = rewards[int(pid)]
            score = math.fsum(1.0 if r > theirs else 0.5 if r == theirs else 0.0 for r in mine) / len(mine)
            kept = self.scores.setdefault(uid, [])
            kept.append(score)
            del kept[: -self.window]

    def adapters_in_play(self) -> int:
        return self.k + 1  # the newest k checkpoints and the current one

    def state_dict(self) -> dict[str, Any]:
        return {"scores": {uid: list(s) for uid, s in self.scores.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scores = {uid: list(s)[-self.window :] for uid, s in state.get("scores", {}).items()}
