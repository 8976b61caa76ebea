"""Env samplers: which environment the next game is played in.

`UniformRandomEnvSampler` draws every training environment equally often. `AdaptiveEnvSampler` is a
curriculum: it favours environments where the learner's recent win rate is near 50%, where the outcome is
least certain and a game teaches the most.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.samplers import BaseEnvSampler, check_kind
from unstable_core.types import EvalEnvSpec, GameInformation, TrainEnvSpec


class UniformRandomEnvSampler(BaseEnvSampler):
    """Training games: every training environment equally likely; evaluation games: every eval env likewise.

    `repeat` = G > 1 plays each drawn (environment, seed, seat assignment, opponents) G times in a row with
    the same checkpoint, as one group (its games carry a group id), so that the `group-relative` reward
    transform compares G games that differ only in what the policy samples (GRPO's G samples per prompt).
    The group in progress is part of `state_dict`: a resumed run finishes it.
    """

    GROUP_KEYS = ("seed", "opponents", "learner", "id")  # what the games of one group share

    def __init__(
        self,
        train_env_specs: Sequence[TrainEnvSpec],
        eval_env_specs: Sequence[EvalEnvSpec] = (),
        seed: int = 0,
        repeat: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(train_env_specs, eval_env_specs, seed, **kwargs)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise UnstableError(
                f"{type(self).__name__}: repeat must be an integer >= 1 (games per seed), got {repeat!r}"
            )
        self.repeat = repeat
        self._current: TrainEnvSpec | None = None
        self._left = 0  # games still to play with the current environment and seed
        self._group: dict[str, Any] = {}  # the group's values (GROUP_KEYS), drawn by its first game

    def group_size(self) -> int:
        """`repeat`: the games of each group."""
        return self.repeat

    def group_left(self) -> int:
        """Games of the group in progress still to be drawn (0: the next game starts a new group)."""
        return self._left

    def group_value(self, key: str, sample: Callable[[], Any]) -> Any:
        """The current group's `key`: `sample()` for the first of its `repeat` games, the same after."""
        if self.repeat == 1:
            return sample()
        if key not in self._group:
            self._group[key] = sample()
        return self._group[key]

    def probabilities(self) -> list[float]:
        """The probability of each training spec (aligned with `train_env_specs`)."""
        n = len(self.train_env_specs)
        return [1.0 / n] * n

    def sample(self, kind: str = "train") -> TrainEnvSpec | EvalEnvSpec:
        """The spec of the next training or evaluation game, drawn with the seeded `self.rng`."""
        check_kind(kind)
        if kind == "eval":
            if not self.eval_env_specs:
                raise UnstableError(
                    f"{type(self).__name__}: an evaluation game was asked for but there is no evaluation "
                    "environment; add one with --eval-env or run no evaluation games"
                )
            return self.rng.choice(self.eval_env_specs)
        if self._left == 0:
            self._current = self.rng.choices(self.train_env_specs, weights=self.probabilities())[0]
            self._left, self._group = self.repeat, {}
        self._left -= 1
        return self._current

    def state_dict(self) -> dict[str, Any]:
        """With `repeat` > 1, the group in progress (env index, games left, and its shared values), JSON-ready."""
        if self.repeat == 1:
            return {}
        env = self.train_env_specs.index(self._current) if self._current is not None else None
        group = {"env": env, "left": self._left}
        group |= {key: self._group.get(key) for key in self.GROUP_KEYS}
        return {"group": group}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the group in progress (a state without one, or from another repeat, starts a new group;
        a state saved before groups pinned their checkpoint and id lets the group draw them afresh)."""
        group = state.get("group") if isinstance(state, dict) else None
        if not group or self.repeat == 1:
            return
        try:
            env, left = group["env"], int(group["left"])
            current = self.train_env_specs[env] if env is not None else None
            values: dict[str, Any] = {}
            if group.get("seed") is not None:
                values["seed"] = int(group["seed"])
            if group.get("opponents") is not None:
                values["opponents"] = [str(o) for o in group["opponents"]]
            for key in ("learner", "id"):
                if group.get(key) is not None:
                    values[key] = str(group[key])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise UnstableError(
                f"{type(self).__name__}: not a saved sampler state ({type(exc).__name__}: {exc})"
            ) from exc
        if current is None or not 0 < left < self.repeat:
            return  # no group was in progress
        self._current, self._left, self._group = current, left, values


def learner_outcome(info: GameInformation) -> float | None:
    """The learner's result in one game: mean over its seats of 1 (reward above every other seat's),
    0.5 (tied with the best other seat) or 0 (below it); alone at the table, its reward is compared with 0.

    None when the game says nothing about the learner (no learner seat, or a learner seat without reward).
    Mirror self-play scores 0.5: one copy's win is the other's loss.
    """
    rewards = info.final_rewards
    if not info.learner_pids or any(pid not in rewards for pid in info.learner_pids):
        return None
    results = []
    for pid in info.learner_pids:
        others = [r for p, r in rewards.items() if p != pid]
        best_other = max(others) if others else 0.0
        results.append(1.0 if rewards[pid] > best_other else 0.5 if rewards[pid] == best_other else 0.0)
    return sum(results) / len(results)


class AdaptiveEnvSampler(UniformRandomEnvSampler):
    """A curriculum over training environments: weight_e = exp(-|p_e - 0.5| / temperature), where p_e is the
    learner's win rate (draw = 0.5) over its last `window` finished training games of environment e.

    An environment with no finished game yet counts as p_e = 0.5 (the largest weight), so every environment
    is tried early and none is starved before anything is known about it. Evaluation games stay uniform.
    """

    def __init__(
        self,
        train_env_specs: Sequence[TrainEnvSpec],
        eval_env_specs: Sequence[EvalEnvSpec] = (),
        seed: int = 0,
        window: int = 50,
        temperature: float = 0.2,
        **kwargs: Any,
    ) -> None:
        super().__init__(train_env_specs, eval_env_specs, seed, **kwargs)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise UnstableError(f"AdaptiveEnvSampler: window must be an integer >= 1, got {window!r}")
        if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature <= 0:
            raise UnstableError(f"AdaptiveEnvSampler: temperature must be a number > 0, got {temperature!r}")
        self.window, self.temperature = window, float(temperature)
        self._outcomes: dict[str, deque[float]] = {}

    def update(self, info: GameInformation) -> None:
        """Record the learner's outcome of a finished training game (failed and eval games are skipped)."""
        if info.eval or info.failed:
            return
        outcome = learner_outcome(info)
        if outcome is not None:
            self._outcomes.setdefault(info.env_id, deque(maxlen=self.window)).append(outcome)

    def win_rate(self, env_id: str) -> float:
        """The learner's mean outcome over the window of `env_id` (0.5 before its first game)."""
        recent = self._outcomes.get(env_id)
        return sum(recent) / len(recent) if recent else 0.5

    def probabilities(self) -> list[float]:
        """p(e) = exp(-|p_e - 0.5| / T) / sum_e' exp(-|p_e' - 0.5| / T), aligned with `train_env_specs`."""
        weights = [
            math.exp(-abs(self.win_rate(s.env_id) - 0.5) / self.temperature) for s in self.train_env_specs
        ]
        total = sum(weights)
        return [w / total for w in weights]

    def state_dict(self) -> dict[str, Any]:
        """The recent outcomes of every environment (and any group in progress), JSON-ready."""
        outcomes = {env: list(q) for env, q in self._outcomes.items()}
        return {**super().state_dict(), "window": self.window, "outcomes": outcomes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the recent outcomes (keeping the last `window` of each environment)."""
        try:
            outcomes = {str(env): [float(x) for x in xs] for env, xs in state["outcomes"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UnstableError(
                f"AdaptiveEnvSampler: not a saved sampler state ({type(exc).__name__}: {exc})"
            ) from exc
        self._outcomes = {env: deque(xs, maxlen=self.window) for env, xs in outcomes.items()}
        super().load_state_dict(state)
