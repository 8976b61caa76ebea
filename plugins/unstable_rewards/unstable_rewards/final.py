"""Final reward transforms: per-seat EMA baselines that remove the advantage of a role (e.g. moving first).

Each keeps one baseline b per (bucket, pid), starting at 0 and updated with every game's reward r:

    b <- alpha * b + (1 - alpha) * r

`role-advantage` (one bucket) and `role-advantage-by-env` (a bucket per env id) return r - b with b
updated first, with UnstableBaselines v0.2's tau = 1 - alpha = 0.001 (alpha = 0.999: a slow baseline,
over about a thousand games); `spiral-rae` (SPIRAL's role-conditioned advantage estimation, a bucket per
env id) returns r - b with b read before the update, so a game is never its own baseline, and keeps
SPIRAL's 0.95.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs

from unstable_core.errors import UnstableError
from unstable_core.rewards import FinalRewardTransform
from unstable_rewards.checks import ema_alpha_arg, finite_reward

ALL_ENVS = "*"  # the single bucket of a transform that does not split by env id


@attrs.define
class _RoleBaseline(FinalRewardTransform):
    """The shared machinery: EMA baselines by bucket and pid, their JSON state and its validation."""

    by_env: ClassVar[bool] = False
    read_before_update: ClassVar[bool] = False

    ema_alpha: float = attrs.field(default=0.95, validator=ema_alpha_arg)
    baselines: dict[str, dict[int, float]] = attrs.field(factory=dict, init=False)

    def __call__(self, rewards: dict[int, float], env_id: str | None = None) -> dict[int, float]:
        """The advantage of every seat, `{pid: r - b}`; updates each seat's baseline with its reward."""
        bucket = self._bucket(env_id)
        checked = {
            self._pid(pid): finite_reward(r, f"{type(self).__name__}: env {env_id!r}, player {pid!r}")
            for pid, r in rewards.items()
        }  # all checked before any baseline moves
        baseline = self.baselines.setdefault(bucket, {})
        alpha = self.ema_alpha
        advantages = {}
        for pid, r in checked.items():
            b_old = baseline.get(pid, 0.0)
            b_new = alpha * b_old + (1 - alpha) * r
            baseline[pid] = b_new
            advantages[pid] = r - (b_old if self.read_before_update else b_new)
        return advantages

    def _pid(self, pid: object) -> int:
        if isinstance(pid, bool) or not isinstance(pid, int):
            raise UnstableError(f"{type(self).__name__}: player ids must be ints (seat numbers), got {pid!r}")
        return pid

    def _bucket(self, env_id: str | None) -> str:
        if not self.by_env:
            return ALL_ENVS
        if not isinstance(env_id, str) or not env_id:
            raise UnstableError(
                f"{type(self).__name__} keeps a baseline per environment: call it with env_id "
                f"(the game's env id), got {env_id!r}"
            )
        return env_id

    def state_dict(self) -> dict[str, Any]:
        """`{"baselines": {bucket: {str(pid): b}}}`, JSON-ready."""
        return {
            "baselines": {
                bucket: {str(pid): b for pid, b in pids.items()} for bucket, pids in self.baselines.items()
            }
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the baselines of `state_dict` (pid keys may be strings, as after a JSON round trip)."""
        name = type(self).__name__
        buckets = state.get("baselines") if isinstance(state, dict) else None
        if not isinstance(buckets, dict):
            raise UnstableError(
                f"{name}: state must be {{'baselines': {{...}}}} as written by state_dict(), got {state!r}"
            )
        restored: dict[str, dict[int, float]] = {}
        for bucket, pids in buckets.items():
            if not isinstance(pids, dict):
                raise UnstableError(
                    f"{name}: state baselines[{bucket!r}] must map player ids to numbers, got {pids!r}"
                )
            restored[bucket] = {}
            for pid, b in pids.items():
                try:
                    pid_int = int(pid)
                except (TypeError, ValueError):
                    raise UnstableError(f"{name}: state player id {pid!r} is not an integer") from None
                if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b):
                    raise UnstableError(
                        f"{name}: state baseline of player {pid!r} must be a finite number, got {b!r}"
                    )
                restored[bucket][pid_int] = float(b)
        self.baselines = restored


REFERENCE_EMA_ALPHA = 0.999  # UnstableBaselines v0.2's tau = 0.001


@attrs.define
class RoleAdvantageFormatter(_RoleBaseline):
    """Subtract from each seat's reward an EMA of that seat's rewards over all games (updated first)."""

    ema_alpha: float = attrs.field(default=REFERENCE_EMA_ALPHA, validator=ema_alpha_arg)


@attrs.define
class RoleAdvantageByEnvFormatter(_RoleBaseline):
    """Subtract from each seat's reward an EMA of that seat's rewards in the same env (updated first)."""

    by_env: ClassVar[bool] = True
    ema_alpha: float = attrs.field(default=REFERENCE_EMA_ALPHA, validator=ema_alpha_arg)


@attrs.define
class SpiralRAE(_RoleBaseline):
    """SPIRAL's role-conditioned advantage: r - b per (env, role), b read before it is updated with r."""

    by_env: ClassVar[bool] = True
    read_before_update: ClassVar[bool] = True
