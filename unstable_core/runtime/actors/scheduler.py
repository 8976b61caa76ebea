"""The game scheduler: env sampler + model sampler -> GameSpec, with reproducible seeds."""

from __future__ import annotations

import contextlib
import random
from collections import deque
from collections.abc import Iterator
from typing import Any

import attrs

from unstable_core.errors import ComponentFailed, UnstableError
from unstable_core.league.league import League
from unstable_core.runtime.actors.scheduled_eval import ScheduledEval
from unstable_core.samplers.base import CURRENT, BaseEnvSampler, BaseModelSampler
from unstable_core.types import GameSpec, PlayerSpec


class GameScheduler:
    """Turns the samplers' choices into concrete games. Game indices are unique across `num_shards`
    schedulers (one per collector) and each game's seed depends only on the run seed and its index
    (unless the env sampler replays an earlier game's seed: `game_seed`)."""

    def __init__(
        self,
        env_sampler: BaseEnvSampler,
        model_sampler: BaseModelSampler,
        seed: int = 0,
        shard: int = 0,
        num_shards: int = 1,
        index_base: int = 0,
    ) -> None:
        self.env_sampler, self.model_sampler = env_sampler, model_sampler
        self.seed, self.shard, self.num_shards = seed, shard, num_shards
        self.index_base = index_base  # a resumed run numbers its games after those already recorded
        self._next = 0

    def _new_index(self) -> int:
        idx = self.index_base + self._next * self.num_shards + self.shard
        self._next += 1
        return idx

    def _seed_of(self, game_idx: int) -> int:
        return random.Random(f"{self.seed}:{game_idx}").randrange(2**31)

    @contextlib.contextmanager
    def samplers_named(self) -> Iterator[None]:
        """What a sampler raises inside this block: one line naming it, its kind and its plugin."""
        try:
            yield
        except ComponentFailed:
            raise
        except Exception as exc:
            from unstable_core.plugins import component_of

            raised = [tb.tb_frame.f_locals.get("self") for tb in _frames(exc.__traceback__)]
            for kind, sampler in (("model_sampler", self.model_sampler), ("env_sampler", self.env_sampler)):
                component = component_of(kind, type(sampler)) if any(s is sampler for s in raised) else None
                if component is not None:
                    raise component.failed(exc) from exc
            raise

    def update(self, info: Any) -> None:
        """Both samplers learn from a finished game."""
        with self.samplers_named():
            self.env_sampler.update(info)
            self.model_sampler.update(info)

    def next_train(self, league: League) -> GameSpec:
        """A training game: the current checkpoint at `num_actors` random seats, sampled opponents elsewhere.
        A game of a group (the env sampler's `repeat`) has its group's id, seed, seats, opponents and
        checkpoint: the one current when the group's first game was scheduled."""
        with self.samplers_named():
            return self._next_train(league)

    def _next_train(self, league: League) -> GameSpec:
        env = self.env_sampler.sample("train")
        idx = self._new_index()
        seed = self.env_sampler.game_seed(self._seed_of(idx))
        rng = random.Random(seed)  # a replayed seed also replays the seats
        current = self.env_sampler.group_value("learner", league.get_current_ckpt)
        if current is None:
            raise UnstableError("the league has no checkpoint yet: register the base model as ckpt-0 first")
        seats = list(range(env.num_players))
        rng.shuffle(seats)

        def draw() -> list[str]:  # one opponent per seat the learner does not hold; itself as CURRENT
            drawn = [self.model_sampler.sample_opponent(league) for _ in seats[env.num_actors :]]
            return [CURRENT if uid == league.get_current_ckpt() else uid for uid in drawn]

        opponents = self.env_sampler.group_opponents(draw)  # a replayed game: its group's opponents
        players = [
            PlayerSpec(pid, current, collect_data=True, prompt_template=env.prompt_template)
            for pid in seats[: env.num_actors]
        ]
        for pid, uid in zip(seats[env.num_actors :], opponents, strict=True):
            uid = current if uid == CURRENT else uid
            players.append(PlayerSpec(pid, uid, collect_data=False, prompt_template=env.prompt_template))
        players.sort(key=lambda p: p.pid)
        size = self.env_sampler.group_size()
        group_id = self.env_sampler.group_value("id", lambda: f"g{idx}") if size > 1 else ""
        return GameSpec(
            game_idx=idx, env_id=env.env_id, seed=seed, players=players, group_id=group_id, group_size=size
        )

    def next_eval(self, league: League) -> GameSpec:
        """An evaluation game: the current checkpoint against the env's fixed opponent (or a sampled one)."""
        with self.samplers_named():
            return self._next_eval(league)

    def _next_eval(self, league: League) -> GameSpec:
        env = self.env_sampler.sample("eval")
        idx = self._new_index()
        rng = random.Random(self._seed_of(idx))
        current = league.get_current_ckpt()
        me = rng.randrange(env.num_players)
        players = []
        for pid in range(env.num_players):
            uid = current if pid == me else (env.fixed_opponent or self.model_sampler.sample_opponent(league))
            players.append(PlayerSpec(pid, uid, collect_data=pid == me, prompt_template=env.prompt_template))
        return GameSpec(game_idx=idx, env_id=env.env_id, seed=self._seed_of(idx), players=players, eval=True)

    def scheduled_eval(self, uid: str, plan: ScheduledEval) -> list[GameSpec]:
        """The scheduled evaluation games of checkpoint `uid`, with game indices of this scheduler."""
        return plan.games_of(uid, self._new_index)

    def state_dict(self) -> dict[str, Any]:
        """The samplers' statistics and RNG streams, JSON-ready (saved with each checkpoint)."""
        out: dict[str, Any] = {}
        for name in ("env_sampler", "model_sampler"):
            sampler = getattr(self, name)
            state = getattr(sampler, "state_dict", dict)()
            rng = getattr(sampler, "rng", None)
            out[name] = {"state": state, "rng": _rng_state(rng) if rng is not None else None}
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        for name in ("env_sampler", "model_sampler"):
            saved = state.get(name) or {}
            sampler = getattr(self, name)
            if saved.get("state") and hasattr(sampler, "load_state_dict"):
                sampler.load_state_dict(saved["state"])
            if saved.get("rng") is not None and getattr(sampler, "rng", None) is not None:
                version, internal, gauss = saved["rng"]
                sampler.rng.setstate((version, tuple(internal), gauss))


def _frames(tb: Any) -> Iterator[Any]:
    """The traceback's entries, outermost first."""
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


class FixedSampler:
    """A fixed schedule's env and model sampler: nothing to learn from a game."""

    def update(self, info: Any) -> None:
        """Nothing to learn from a game: the schedule is fixed."""


@attrs.define
class FixedScheduler:
    """Hands a collector the games of a fixed schedule in order (an evaluation's; no training games)."""

    specs: deque[GameSpec] = attrs.field(converter=deque)
    env_sampler: FixedSampler = attrs.field(factory=FixedSampler, init=False)
    model_sampler: FixedSampler = attrs.field(factory=FixedSampler, init=False)
    shard: int = attrs.field(default=0, init=False)
    num_shards: int = attrs.field(default=1, init=False)

    def next_eval(self, league: Any) -> GameSpec:
        return self.specs.popleft()

    def update(self, info: Any) -> None:
        """Nothing to learn from a game: the schedule is fixed."""

    def next_train(self, league: Any) -> GameSpec:
        raise UnstableError("a fixed schedule plays no training games")
