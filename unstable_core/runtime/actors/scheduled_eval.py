"""Scheduled evaluation: after checkpoint K, 2K, ... is published, M games of it against each eval
opponent on each eval env, seats alternated, summarised per (env, opponent) with Wilson intervals
(`report.scheduled_eval`) and logged against that checkpoint in metrics.jsonl.

The games are played by the collectors beside the training games (the learner never waits for them) and
are evaluation games: never training data; like every evaluation game they move TrueSkill ratings.
Game j of a (env, opponent) pair has the same seed for every checkpoint, so checkpoints meet the same
deals and openings (common random numbers: less noise in their differences).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs

from unstable_core.probes.catalogue import PlannedProbe
from unstable_core.types import EvalEnvSpec, GameSpec, PlayerSpec

DEFAULT_OPPONENT = "base"


@attrs.frozen
class ScheduledEval:
    """What to evaluate and when: `games` games per spec (env, opponent) after every `every` learner steps,
    and each planned probe of `probes` on the base model and on those checkpoints (`runtime.actors.probes`)."""

    specs: tuple[EvalEnvSpec, ...]
    every: int
    games: int
    seed: int = 0
    probes: tuple[PlannedProbe, ...] = ()

    def due(self, iteration: int, shard: int = 0, num_shards: int = 1) -> bool:
        """Whether checkpoint `iteration` is evaluated, and by collector `shard` (one collector per
        checkpoint, taking turns, so that one collector holds all of a checkpoint's games)."""
        return (
            iteration > 0 and iteration % self.every == 0 and (iteration // self.every) % num_shards == shard
        )

    def games_of(self, uid: str, new_index: Callable[[], int]) -> list[GameSpec]:
        """The games of checkpoint `uid`: per spec, game j puts it at seat j mod players."""
        out = []
        for spec in self.specs:
            opponent = spec.fixed_opponent or DEFAULT_OPPONENT
            for j in range(self.games):
                me = j % spec.num_players
                players = [
                    PlayerSpec(
                        pid,
                        uid if pid == me else opponent,
                        collect_data=pid == me,  # its steps give the rates; eval games never reach the buffer
                        prompt_template=spec.prompt_template,
                    )
                    for pid in range(spec.num_players)
                ]
                seed = random.Random(f"{self.seed}:eval:{spec.env_id}:{opponent}:{j}").randrange(2**31)
                out.append(GameSpec(new_index(), spec.env_id, seed, players, eval=True))
        return out
