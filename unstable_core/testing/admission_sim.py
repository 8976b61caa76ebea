"""A discrete-time simulation of the training pipeline around the real buffer and its admission control:
a collector keeps `workers` training games in flight as the buffer admits them, games of `group_size`
share their first game's policy version (as the scheduler pins a group's checkpoint), and a learner takes
batches, updates and publishes versions. No Ray, no model: one tick is one turn.

It checks the promises of `runtime/actors/admission.py` over many pipeline shapes (tests/test_admission_sim.py,
benchmarks/admission.py): every update happens, no batch holds data older than `max_staleness` versions,
and what the games produced is trained on, not dropped.
"""

from __future__ import annotations

import random

import attrs

from unstable_core.runtime.actors.buffer import BUFFERS
from unstable_core.types import GameInformation, GameResult, Step, Trajectory


@attrs.frozen
class Shape:
    """One pipeline: G games per group, L training steps per game on average (drawn from L/2 .. 3L/2, and
    0 for a share of games whose learner never moved), S max staleness, B batch size."""

    group_size: int
    steps: int
    max_staleness: int
    batch_size: int
    workers: int = 8
    updates: int = 8
    ticks_per_step_update: float = 0.25  # an update takes this many ticks per step of its batch
    empty_share: float = 0.1
    buffer: str = "step"
    admission: str = "budget"
    seed: int = 0


@attrs.frozen
class Outcome:
    """What a simulated run did: updates made, the worst staleness a batch had, steps played, used, and
    lost (stale or evicted), whether it stalled (no update within `stall_ticks`), and the ticks it took."""

    updates: int
    worst_staleness: int
    generated: int
    used: int
    lost: int
    largest_batch: int
    stalled: bool
    ticks: int

    @property
    def lost_share(self) -> float:
        return self.lost / self.generated if self.generated else 0.0


@attrs.define
class _Game:
    ticket: int | None
    idx: int
    version: int
    steps: int
    ends_at: int
    group_id: str


def _result(game: _Game, group_size: int) -> GameResult:
    steps = [
        Step(pid=0, env_id="E", obs="o", act="a", turn=2 * t, game_idx=game.idx, policy_version=game.version,
             group_id=game.group_id)
        for t in range(game.steps)
    ]  # fmt: skip
    info = GameInformation(
        game_idx=game.idx,
        env_id="E",
        final_rewards={0: 1.0, 1: -1.0},
        learner_pids=[0],
        group_id=game.group_id,
        group_size=group_size if game.group_id else 1,
    )
    return GameResult(
        info=info, trajectories=[Trajectory(pid=0, env_id="E", model_uid="m", collect_data=True, steps=steps)]
    )


def simulate(shape: Shape, stall_ticks: int = 2000) -> Outcome:
    """Run `shape` until the learner made `shape.updates` updates, or stalled for `stall_ticks` ticks."""
    rng = random.Random(f"{shape}")
    buffer = BUFFERS[shape.buffer](
        (shape.max_staleness + 1 if shape.admission == "budget" else 2) * shape.batch_size,
        max_staleness=shape.max_staleness,
        admission=shape.admission,
        batch_size=shape.batch_size,
    )
    G = shape.group_size
    games: list[_Game] = []
    group_left, group_version, group_id, next_idx = 0, 0, "", 0
    version, busy_until, updates, worst, largest = 0, None, 0, 0, 0
    tick = last_update = 0
    while updates < shape.updates and tick - last_update < stall_ticks:
        tick += 1
        for game in [g for g in games if g.ends_at <= tick]:  # games end, their steps reach the buffer
            games.remove(game)
            buffer.add_result(_result(game, G))
            buffer.release(game.ticket, game.steps)
        if busy_until is not None and tick >= busy_until:  # the update ends: a new version is published
            version, busy_until, last_update = version + 1, None, tick
            updates += 1
            buffer.set_policy_version(version)
        continuing = group_left if G > 1 else 0
        for ticket in buffer.admit(shape.workers - len(games), G, continuing, 0):
            if G > 1 and group_left == 0:  # the scheduler draws a new group, pinned to the current version
                group_left, group_version, group_id = G, version, f"g{next_idx}"
            group_left -= G > 1
            low, high = max(1, shape.steps // 2), shape.steps + shape.steps // 2
            steps = 0 if rng.random() < shape.empty_share else rng.randint(low, high)
            played_by = group_version if G > 1 else version
            games.append(
                _Game(ticket, next_idx, played_by, steps, tick + max(1, steps), group_id if G > 1 else "")
            )
            next_idx += 1
        if busy_until is None and (batch := buffer.get_batch(shape.batch_size)):
            worst = max(worst, version - min(s.policy_version for s in batch))
            largest = max(largest, len(batch))
            busy_until = tick + max(1, round(shape.ticks_per_step_update * len(batch)))
    stats = buffer.stats()
    return Outcome(
        updates=updates,
        worst_staleness=worst,
        generated=stats["steps_generated"],
        used=stats["steps_served"],
        lost=stats["steps_stale"] + stats["steps_evicted"] + stats["steps_incomplete"],
        largest_batch=largest,
        stalled=updates < shape.updates,
        ticks=tick,
    )
