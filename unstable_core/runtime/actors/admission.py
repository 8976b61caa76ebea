"""Admission control: a training game starts only while what it will produce can still be trained on.

The learner consumes `batch_size` steps per update and accepts data at most `max_staleness` versions old,
so from the version `v` it serves now it will take (max_staleness + 1) x batch_size more steps before data
of version `v` goes stale (a batch less once the update to v + 1 has taken its batch). The steps held in the buffer and those expected from games in flight form the
pipeline's commitment; a game is admitted only while the commitment, with the game's expected steps, stays
within that budget (and within the buffer's capacity, so that nothing is evicted). It is AReaL's bound on
off-policyness (`max_head_offpolicyness`), in steps of multi-turn games instead of samples.

A game's steps are known only when it ends, so each admission books an estimate: the mean steps of the
training games finished so far (an exponential moving average); before any has, one game is played alone
(an early guess that is too short would commit more than the budget to the first version). A game ends
with its ticket released; the buffer then holds what it really produced.

Groups (GRPO's G games from one start, the env sampler's `repeat`) are admitted whole: a group is trained
on only once its G games have arrived, so the first game of a group books all G, and the group's other
games are admitted whatever the budget when their turn comes (`continuing`), at the version of its first.
When the learner lacks a batch and nothing is in flight, one game, or one group, is admitted even if it
is longer than the budget: otherwise the learner would wait for a batch forever. That exception does not
apply while the update runs with the version's budget spent (max_staleness 0): a game admitted then
would be played by the old version and be stale on arrival.

The other half of the bound is the learner's: a batch is served only when no game admitted at a version
that the next update makes stale is still being played or waiting to start (`blocks_batch`), the oldest
data is served first, and a batch also takes everything that the next update would make stale (the
buffer's `get_batch`), so a long game of an old version, or more games of a version than its estimate
booked, is trained on instead of dropped, for every max_staleness.
"""

from __future__ import annotations

import attrs

ADMISSION_POLICIES = ("budget", "drop")  # budget: this module; drop: start freely, drop what goes stale


@attrs.frozen
class Ticket:
    """One admitted game: its id, the policy version it was admitted under and the steps booked for it."""

    id: int
    version: int
    expected: float


@attrs.frozen
class Reservation:
    """The games of a caller's group that are booked but not started yet: how many, at what version."""

    games: int
    version: int
    expected: float


@attrs.define
class Admission:
    """The budget of training steps committed ahead of the learner (see the module's docstring)."""

    batch_size: int
    max_staleness: int
    capacity: int
    smoothing: float = 0.2
    _mean_steps: float | None = attrs.field(default=None, alias="mean_steps")
    _tickets: dict[int, Ticket] = attrs.field(factory=dict)
    _reserved: dict[object, Reservation] = attrs.field(factory=dict)  # caller -> its group's games to come
    _next_id: int = 0
    _batches_taken: int = 0  # batches served since the current version was published (the update running)

    @property
    def budget(self) -> int:
        """Steps the learner takes before data of the version it serves now goes stale: max_staleness + 1
        batches, less those already taken at this version; at most the buffer."""
        return min(self._batches_left() * self.batch_size, self.capacity)

    def _batches_left(self) -> int:
        return max(0, self.max_staleness + 1 - self._batches_taken)

    def batch_served(self) -> None:
        """The learner took a batch: one update less before the current version's data goes stale."""
        self._batches_taken += 1

    def version_published(self) -> None:
        """A new version is current: its data has the whole budget ahead of it."""
        self._batches_taken = 0

    @property
    def expected_steps(self) -> float:
        """What a new game is expected to produce: the finished games' mean; the whole budget before any
        finished (one game at a time until the first tells how long games are)."""
        return self._mean_steps if self._mean_steps is not None else self.budget

    @property
    def in_flight(self) -> int:
        return len(self._tickets)

    def booked(self) -> float:
        """Steps expected from the games in flight and from the games of started groups still to start."""
        reserved = sum(r.games * r.expected for r in self._reserved.values())
        return sum(t.expected for t in self._tickets.values()) + reserved

    def admit(
        self,
        wanted: int,
        held: int,
        version: int,
        group_size: int = 1,
        continuing: int = 0,
        caller: object = 0,
    ) -> list[int]:
        """Tickets for at most `wanted` new games of `caller` at `version`, while `held` steps (in the buffer,
        whole or in groups still waiting for games) and the games booked stay within the budget.

        `caller`'s games come in groups of `group_size`; its next `continuing` games belong to a group
        already started: they are admitted first, whatever the budget. A new group is admitted only whole
        (G games booked), its games beyond `wanted` reserved for the caller's next calls. With nothing
        booked, less than a batch held and a batch still to take at this version, one game or group is
        admitted whatever the budget (see the module's docstring)."""
        tickets = self._continue_group(caller, min(wanted, continuing), continuing, version)
        if continuing > len(tickets):  # the caller's next games are still the group's
            return tickets
        committed = held + self.booked()
        starved = not self.booked() and held < self.batch_size and self._batches_left() > 0
        while len(tickets) < wanted:
            cost = self.expected_steps
            if committed + group_size * cost > self.budget and not starved:
                break
            starved = False
            games = min(wanted - len(tickets), group_size)
            tickets += [self._ticket(version, cost) for _ in range(games)]
            if games < group_size:
                self._reserved[caller] = Reservation(group_size - games, version, cost)
            committed += group_size * cost
        return tickets

    def _continue_group(self, caller: object, games: int, continuing: int, version: int) -> list[int]:
        """Tickets for the next `games` of the `continuing` games of `caller`'s group in progress, at the
        version of the group's first (a group resumed after a restart has no reservation: the current)."""
        reservation = self._reserved.pop(caller, None)
        if not continuing:
            return []
        at = reservation.version if reservation is not None else version
        cost = reservation.expected if reservation is not None else self.expected_steps
        if continuing > games:
            self._reserved[caller] = Reservation(continuing - games, at, cost)
        return [self._ticket(at, cost) for _ in range(games)]

    def _ticket(self, version: int, expected: float) -> int:
        ticket = Ticket(self._next_id, version, expected)
        self._next_id += 1
        self._tickets[ticket.id] = ticket
        return ticket.id

    def release(self, ticket: int, steps: int | None) -> None:
        """The game of `ticket` ended with `steps` training steps (None: it failed, nothing to learn from
        its length); an unknown ticket (a game admitted before a restart) is ignored."""
        if self._tickets.pop(ticket, None) is None or steps is None:
            return
        if self._mean_steps is None:
            self._mean_steps = float(steps)
        else:
            self._mean_steps += self.smoothing * (steps - self._mean_steps)

    def blocks_batch(self, version: int) -> bool:
        """Whether a game admitted at a version that the next update makes stale (`version` -
        max_staleness or older) is still being played, or is of a group still to start: the learner
        waits for it."""
        oldest = version - self.max_staleness
        return any(t.version <= oldest for t in self._tickets.values()) or any(
            r.version <= oldest for r in self._reserved.values()
        )
