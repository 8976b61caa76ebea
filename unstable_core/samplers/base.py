"""Base classes of the two samplers a game scheduler asks: which environment, and which opponent.

Plugins (such as `unstable-samplers`) subclass these. Samplers are plain Python objects (no Ray),
living inside the collector; they see the league as a `League` snapshot.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.league.league import League
from unstable_core.types import EvalEnvSpec, GameInformation, TrainEnvSpec

# an opponent that is the learner's current checkpoint, whichever it is when the game starts
CURRENT = "@current"


def _reject_unknown_options(sampler: str, options: dict[str, Any]) -> None:
    """Options a sampler's constructor did not take are typos: say so instead of ignoring them."""
    if options:
        raise UnstableError(
            f"{sampler} got unknown option(s) {', '.join(sorted(options))}; check the sampler's options in the config"
        )


def check_kind(kind: str) -> None:
    """`sample(kind)` takes "train" or "eval"."""
    if kind not in ("train", "eval"):
        raise UnstableError(f"an env sampler samples kind 'train' or 'eval', got {kind!r}")


class BaseEnvSampler:
    """Chooses the environment of the next game."""

    def __init__(
        self,
        train_env_specs: Sequence[TrainEnvSpec],
        eval_env_specs: Sequence[EvalEnvSpec] = (),
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        _reject_unknown_options(type(self).__name__, kwargs)
        if not train_env_specs:
            raise UnstableError(
                f"{type(self).__name__} needs at least one training environment; add one to the config"
            )
        self.train_env_specs = list(train_env_specs)
        self.eval_env_specs = list(eval_env_specs)
        self.rng = random.Random(seed)

    def sample(self, kind: str = "train") -> TrainEnvSpec | EvalEnvSpec:
        """The spec of the next training (`kind="train"`) or evaluation (`kind="eval"`) game."""
        raise NotImplementedError

    def group_size(self) -> int:
        """How many games each group has (GRPO's G games from one start); 1: games are not grouped."""
        return 1

    def group_left(self) -> int:
        """Games of the current group still to be drawn: 0 when the next training game starts a new one."""
        return 0

    def group_value(self, key: str, sample: Callable[[], Any]) -> Any:
        """The training game just sampled's value of `key` ("seed", "opponents", "learner", "id"), given
        `sample()` that draws a fresh one; a sampler that groups games returns its group's first draw for
        the rest of the group, so a group's games differ only in what the policy samples."""
        return sample()

    def game_seed(self, fresh_seed: int) -> int:
        """The seed of the training game just sampled, given a fresh one from the scheduler (which also
        seeds the seat assignment); a sampler that replays seeds (GRPO's groups) returns an earlier one."""
        return self.group_value("seed", lambda: fresh_seed)

    def group_opponents(self, sample: Callable[[], list[str]]) -> list[str]:
        """The opponents of the training game just sampled, given `sample()` that draws fresh ones; a sampler
        that replays games (GRPO's groups) returns the group's first draw for the rest of it. Entries may be
        `CURRENT`: the current checkpoint."""
        return list(self.group_value("opponents", lambda: list(sample())))

    def update(self, info: GameInformation) -> None:
        """Learn from a finished game (for adaptive curricula); nothing by default."""

    def env_list(self) -> str:
        """The training env ids, comma-separated (for run names)."""
        return ",".join(s.env_id for s in self.train_env_specs)

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready statistics to save with a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


class BaseModelSampler:
    """Chooses the opponent of the learner's current checkpoint."""

    def __init__(self, seed: int = 0, **kwargs: Any) -> None:
        _reject_unknown_options(type(self).__name__, kwargs)
        self.rng = random.Random(seed)

    def sample_opponent(self, league: League) -> str:
        """The uid (in `league`) of the opponent for the next game; `league.learner_step()` is the step of
        the learner's current checkpoint."""
        raise NotImplementedError

    def opponents(self) -> list[str]:
        """The fixed opponents this sampler returns by name (a scripted player such as `heuristic`, a model,
        an adapter folder), beside what it finds in the league. A fixed opponent enters the league as a
        `--fixed-opponent` (or an eval env's opponent) of the run: each name here must be one, checked
        before the run starts. None by default."""
        return []

    def adapters_in_play(self) -> int | None:
        """How many checkpoints (LoRA adapters) this sampler's games use at once, the current one included;
        None if any number (the run then keeps `max_loras` adapters loaded per inference actor)."""
        return None

    def update(self, info: GameInformation) -> None:
        """Learn from a finished game; nothing by default (ratings live in the league)."""
