"""Replay buffers between the collectors and the learner.

A buffer owns the run's `RewardPipeline` (`unstable_core.rewards.pipeline`): a finished game is shaped by the
final and step transforms before it is stored, and each batch by the sampling transforms as it is served.

`StepBuffer` holds steps (REINFORCE-style learners); `EpisodeBuffer` holds whole trajectories (learners
that need every step of an episode, e.g. GAE). Without admission control both evict the oldest data
beyond `max_buffer_size`; both never serve data produced more than `max_staleness` policy versions before the current one: the bound is
checked when a game arrives (it may have been played by a version that was current when it started),
when a new version is published, and again when a batch is served.

Games of a group (GRPO's G games from one start, `GameSpec.group_id`) are held until the group is whole,
then stored, evicted, dropped as stale and served as one unit, so that a batch never cuts a group and a
group-relative baseline always sees its G games. A group that cannot become whole (one of its games failed
or arrived too old) is dropped and counted (`groups_incomplete`), as are whole groups dropped as stale or
evicted (`groups_dropped`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs

from unstable_core.rewards.pipeline import RewardPipeline
from unstable_core.runtime.actors.admission import Admission
from unstable_core.runtime.actors.request_batching import answer_each
from unstable_core.types import GameResult, Step, Trajectory


class StepBuffer:
    """Steps of finished training games; `get_batch(n)` removes and returns n of them (oldest first), or
    at least n made of whole groups when the games are grouped."""

    def __init__(
        self,
        max_buffer_size: int,
        final_transforms: list[Any] = (),
        step_transforms: list[Any] = (),
        sampling_transforms: list[Any] = (),
        max_staleness: int | None = None,
        admission: str = "drop",
        batch_size: int | None = None,
    ) -> None:
        """`admission`: "budget" starts a training game only while its steps can be trained on in time
        (`Admission`, needs `batch_size` and `max_staleness`); "drop" starts games while the buffer has
        room and drops what goes stale."""
        self.max_buffer_size = max_buffer_size
        self.max_staleness = max_staleness
        self.admission: Admission | None = None
        if admission == "budget":
            if batch_size is None or max_staleness is None:
                raise ValueError("admission 'budget' needs batch_size and max_staleness")
            self.admission = Admission(batch_size, max_staleness, max_buffer_size)
        elif admission != "drop":
            raise ValueError(f"admission must be 'budget' or 'drop', got {admission!r}")
        self.rewards = RewardPipeline(final_transforms, step_transforms, sampling_transforms)
        self.policy_version = 0
        self.stopped = False
        self.counts = {
            "games": 0,
            "steps_added": 0,
            "steps_evicted": 0,
            "steps_stale_on_add": 0,
            "steps_stale_on_publish": 0,
            "steps_stale_on_serve": 0,
            "steps_served": 0,
            "groups_served": 0,
            "groups_dropped": 0,
            "groups_incomplete": 0,
            "groups_empty": 0,
            "steps_incomplete": 0,
            "games_admitted": 0,
            "updates_waiting_for_stragglers": 0,
        }
        self._units: deque[list[Step]] = deque()  # a step, an episode or a whole group: served whole
        self._n = 0  # steps held in `_units`
        self._pending: dict[str, _Group] = {}  # groups still waiting for some of their games
        self._waited_at: int | None = None  # the last version whose update waited for a straggler

    # ---- what one unit of storage is: a step (StepBuffer) or a trajectory in turn order (EpisodeBuffer)
    def _units_of(self, trajectories: list[Trajectory]) -> list[list[Step]]:
        return [[s] for t in trajectories for s in t.steps]

    def _within_bound(self, version: int, current: int | None = None) -> bool:
        """Whether data of policy `version` is within `max_staleness` versions of `current` (default: the
        current version)."""
        current = self.policy_version if current is None else current
        return self.max_staleness is None or version >= current - self.max_staleness

    def _fresh(self, unit: list[Step], current: int | None = None) -> bool:
        return self._within_bound(min(s.policy_version for s in unit), current)

    def size(self) -> int:
        """Number of steps held and ready to serve (a group still waiting for games is not)."""
        return self._n

    def add_result(self, result: GameResult) -> int:
        """Shape and store the training trajectories of a finished game; returns the number of steps added
        (0 for a game played by a version already too old: its steps are counted as stale; 0 too for a game
        of a group that is not whole yet: its steps are added with the group's last game)."""
        info = result.info
        if info.eval:
            return 0
        group = self._group_of(info)
        if info.failed:
            if group is not None:  # a group with a failed game can never be whole
                self._arrived(info.group_id, group.broken_by([]))
            return 0
        self.counts["games"] += 1
        oldest = min((s.policy_version for t in result.training_trajectories for s in t.steps), default=None)
        if oldest is not None and not self._within_bound(oldest):
            # dropped before the transforms run: a game too old to train on must not move their baselines
            self.counts["steps_stale_on_add"] += sum(len(t.steps) for t in result.training_trajectories)
            if group is not None:
                self._arrived(info.group_id, group.broken_by([]))
            return 0
        units = self._units_of(self.rewards.shape_game(result))
        if group is not None:
            if group.broken:
                self.counts["steps_incomplete"] += sum(len(u) for u in units)
                self._arrived(info.group_id, [])
                return 0
            group.units.extend(units)
            if not self._arrived(info.group_id, []):
                return 0
            units = [[s for u in group.units for s in u]]  # the whole group: one unit
            if not units[0]:  # no game of the group reached a learner's turn: nothing to train on
                self.counts["groups_empty"] += 1
                return 0
        fresh = [u for u in units if self._fresh(u)]
        self.counts["steps_stale_on_add"] += sum(len(u) for u in units if not self._fresh(u))
        self.counts["groups_dropped"] += sum(_is_group(u) for u in units if not self._fresh(u))
        self._units.extend(fresh)
        added = sum(len(u) for u in fresh)
        self._n += added
        self.counts["steps_added"] += added
        self._evict()
        return added

    def add_results(self, results: list[GameResult]) -> list[Any]:
        """`add_result` for many games in order (one Ray call per pass of the collector's loop); per game,
        the steps added or the exception it raised."""
        return answer_each(self.add_result, results)

    def _group_of(self, info: Any) -> _Group | None:
        """The pending group of a grouped game (created by its first game to arrive), None outside groups."""
        if not info.group_id or info.group_size <= 1:
            return None
        return self._pending.setdefault(info.group_id, _Group(info.group_size))

    def _arrived(self, group_id: str, dropped: list[Step]) -> bool:
        """Count one more game of the group (and `dropped`, the steps a break threw away); True when it was
        the group's last, which then leaves the pending groups."""
        group = self._pending[group_id]
        if dropped or group.broken and not group.counted:
            self.counts["groups_incomplete"] += not group.counted
            group.counted = True
            self.counts["steps_incomplete"] += len(dropped)
        group.arrived += 1
        if group.arrived < group.size:
            return False
        del self._pending[group_id]
        return True

    def _evict(self) -> None:
        """Under "drop", the oldest units beyond `max_buffer_size` (a group larger than the buffer stays).
        Under "budget", nothing: the admission bounds what is held (the capacity caps its budget), and
        what it admitted beyond, a game longer than its estimate, is trained on."""
        if self.admission is not None:
            return
        while len(self._units) > 1 and self._n > self.max_buffer_size:
            unit = self._units.popleft()
            self._n -= len(unit)
            self.counts["steps_evicted"] += len(unit)
            self.counts["groups_dropped"] += _is_group(unit)

    def _drop_stale(self, where: str) -> int:
        """Remove held data older than `max_staleness` versions, whole groups included, and break the groups
        still waiting whose games are already that old; count it under `steps_stale_<where>`."""
        keep = [u for u in self._units if self._fresh(u)]
        self.counts["groups_dropped"] += sum(_is_group(u) for u in self._units if not self._fresh(u))
        held = sum(len(u) for u in keep)
        dropped = self._n - held
        self._units, self._n = deque(keep), held
        for group in self._pending.values():
            steps = [s for u in group.units for s in u]
            if steps and not self._fresh(steps):
                dropped += len(steps)
                group.broken_by([])
                self.counts["groups_incomplete"] += not group.counted
                group.counted = True
        self.counts[f"steps_stale_{where}"] += dropped
        return dropped

    def set_policy_version(self, version: int) -> int:
        """The learner's current version; drops data older than `max_staleness` versions. Returns steps dropped."""
        self.policy_version = version
        if self.admission is not None:
            self.admission.version_published()
        return self._drop_stale("on_publish")

    def get_batch(self, batch_size: int) -> list[Step] | None:
        """At least `batch_size` fresh steps, sampling transforms applied (exactly that many for a StepBuffer
        of ungrouped games; whole episodes or whole groups otherwise); None while the buffer holds fewer."""
        self._drop_stale("on_serve")
        if self.size() < batch_size:
            return None
        if self.admission is not None:
            if self.admission.blocks_batch(self.policy_version):  # a straggler would go stale: wait for it
                self.counts["updates_waiting_for_stragglers"] += self._waited_at != self.policy_version
                self._waited_at = self.policy_version
                return None
            self._units = deque(sorted(self._units, key=lambda u: min(s.policy_version for s in u)))
        batch: list[Step] = []
        while len(batch) < batch_size or self._takes_surplus(batch):
            unit = self._units.popleft()
            batch.extend(unit)
            self.counts["groups_served"] += _is_group(unit)
        self._n -= len(batch)
        self.counts["steps_served"] += len(batch)
        if self.admission is not None:
            self.admission.batch_served()
        return self.rewards.shape_batch(batch)

    def _takes_surplus(self, batch: list[Step]) -> bool:
        """Under admission control, whether the batch also takes the next held unit because the next
        publication would make it stale (games longer than the budget's estimate produced more than a
        batch of a version): it is trained on now instead of dropped. What is held is bounded by the
        admission (and the buffer's capacity), so the batch is too."""
        if self.admission is None or not self._units:
            return False
        return not self._fresh(self._units[0], self.policy_version + 1)

    def continue_collection(self) -> bool:
        """False once stopped, or while full (back-pressure: new games would only be evicted)."""
        return not self.stopped and self.size() < self.max_buffer_size

    def admit(
        self, wanted: int, group_size: int = 1, continuing: int = 0, caller: object = 0
    ) -> list[int | None]:
        """Tickets for at most `wanted` new training games of `caller` (a collector), whose games come in
        groups of `group_size` and whose next `continuing` games finish a group (see `Admission.admit`);
        with admission "drop", `wanted` untracked ones (None) while `continue_collection`, else none."""
        if self.stopped:
            return []
        if self.admission is None:
            return [None] * wanted if self.continue_collection() else []
        held = self.size() + self._pending_steps()
        tickets = self.admission.admit(wanted, held, self.policy_version, group_size, continuing, caller)
        self.counts["games_admitted"] += len(tickets)
        return tickets

    def release(self, ticket: int | None, steps: int | None) -> None:
        """The admitted game of `ticket` ended with `steps` training steps (None: it failed)."""
        if self.admission is not None and ticket is not None:
            self.admission.release(ticket, steps)

    def release_many(self, items: list[tuple[int | None, int | None]]) -> list[Any]:
        """`release` for the games of one pass of a collector's loop."""
        return answer_each(lambda item: self.release(*item), items)

    def _pending_steps(self) -> int:
        return sum(len(u) for g in self._pending.values() for u in g.units)

    def stop(self) -> None:
        self.stopped = True

    def stats(self) -> dict[str, Any]:
        """Counts of what was added, evicted, dropped as stale (where) and served; size and version."""
        stale = sum(v for k, v in self.counts.items() if k.startswith("steps_stale_"))
        return {
            **self.counts,
            "steps_stale": stale,
            "size": self.size(),
            "groups_pending": sum(not g.broken for g in self._pending.values()),
            "policy_version": self.policy_version,
            "steps_generated": self.steps_generated(),
            **({"games_in_flight": self.admission.in_flight} if self.admission is not None else {}),
        }

    def steps_generated(self) -> int:
        """Training steps that reached the buffer: kept, dropped as stale on arrival, or cut with a group."""
        c = self.counts
        return c["steps_added"] + c["steps_stale_on_add"] + c["steps_incomplete"]

    def state_dict(self) -> dict[str, Any]:
        """The reward transforms' statistics (EMA baselines), to save with a checkpoint."""
        return self.rewards.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rewards.load_state_dict(state)


@attrs.define
class _Group:
    """The games of one group that have arrived. A failed or stale game breaks it: it can never be whole,
    so what it held is dropped, and its later games are dropped as they arrive."""

    size: int
    units: list[list[Step]] = attrs.field(factory=list)
    arrived: int = 0
    broken: bool = False
    counted: bool = False  # in groups_incomplete

    def broken_by(self, dropped: list[Step]) -> list[Step]:
        """Break the group; returns the steps it held (to count as dropped)."""
        held = [s for u in self.units for s in u] + list(dropped)
        self.broken, self.units = True, []
        return held


def _is_group(unit: list[Step]) -> bool:
    return bool(unit) and bool(unit[0].group_id) and len({s.game_idx for s in unit}) > 1


class EpisodeBuffer(StepBuffer):
    """Whole trajectories, served complete and in turn order (for GAE and other per-episode maths)."""

    def _units_of(self, trajectories: list[Trajectory]) -> list[list[Step]]:
        return [sorted(t.steps, key=lambda s: s.turn) for t in trajectories if t.steps]


BUFFERS = {"step": StepBuffer, "episode": EpisodeBuffer}
