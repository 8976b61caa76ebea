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

The other half of the bound is the learner's: a batch is served only when no game admitted at a version
that the next update makes stale is still being played (`blocks_batch`), the oldest data is served
first, and a batch also takes what the next update would make stale, up to `max_batch` steps (the buffer's
`get_batch`), so a long game of an old version, or more games of a version than its estimate booked, is
trained on instead of dropped.
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


@attrs.define
class Admission:
    """The budget of training steps committed ahead of the learner (see the module's docstring)."""

    batch_size: int
    max_staleness: int
    capacity: int
    smoothing: float = 0.2
    _mean_steps: float | None = attrs.field(default=None, alias="mean_steps")
    _tickets: dict[int, Ticket] = attrs.field(factory=dict)
    _next_id: int = 0
    _batches_taken: int = 0  # batches served since the current version was published (the update running)

    @property
    def budget(self) -> int:
        """Steps the learner takes before data of the version it serves now goes stale: max_staleness + 1
        batches, less those already taken at this version; at most the buffer."""
        batches = max(0, self.max_staleness + 1 - self._batches_taken)
        return min(batches * self.batch_size, self.capacity)

    @property
    def max_batch(self) -> int:
        """The most steps one batch takes: a batch and what would otherwise go stale, at most the whole
        budget of a version ((max_staleness + 1) batches)."""
        return (self.max_staleness + 1) * self.batch_size

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
        """Steps expected from the games in flight."""
        return sum(t.expected for t in self._tickets.values())

    def admit(self, wanted: int, held: int, version: int) -> list[int]:
        """Tickets for at most `wanted` new games at `version`, while `held` steps (ready in the buffer) and
        the games in flight stay within the budget. With no game in flight and less than a batch held, one
        game is admitted whatever the budget says: games longer than the budget must still be played, or
        the learner would wait for a batch forever."""
        tickets = []
        committed = held + self.booked()
        starved = not self._tickets and held < self.batch_size
        for _ in range(wanted):
            cost = self.expected_steps
            if committed + cost > self.budget and not (starved and not tickets):
                break
            ticket = Ticket(self._next_id, version, cost)
            self._next_id += 1
            self._tickets[ticket.id] = ticket
            tickets.append(ticket.id)
            committed += cost
        return tickets

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
        max_staleness or older) is still being played: the learner waits for it."""
        return any(t.version <= version - self.max_staleness for t in self._tickets.values())
