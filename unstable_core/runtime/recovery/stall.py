"""A pipeline that makes no progress: the learner has waited for a batch, or been inside one update, for
longer than the run's stall timeout. The watchdog of processes and the liveness check see actors that
die; this sees actors that live but wait for each other. `StallWatch` is pure (the driver feeds it what
the learner and the buffer report), so each kind of stall is one branch and one test.
"""

from __future__ import annotations

from typing import Any

import attrs

from unstable_core.runtime.recovery.liveness import ActorDied


@attrs.frozen
class LearnerPhase:
    """What the learner does: "starting", "waiting" (for a batch), "updating" or "done", since when
    (`time.time()`), and its step (the policy version it serves)."""

    state: str
    since: float
    step: int


class PipelineStalled(ActorDied):
    """The pipeline made no progress for the stall timeout (`why` names what is stuck): the run stops at
    its last complete checkpoint, as for a dead actor, without waiting for an update that does not end."""

    event = "stalled"
    stop_timeout_s = 10.0

    def __init__(self, why: str) -> None:
        super().__init__("the pipeline", why)

    @property
    def what(self) -> str:
        return f"made no progress ({self.why})"


@attrs.define
class StallWatch:
    """Says why the pipeline is stuck once the learner has been in one phase for `timeout_s`, else None."""

    timeout_s: float
    batch_size: int

    def check(self, now: float, phase: LearnerPhase, buffer: dict[str, Any]) -> str | None:
        waited = now - phase.since
        if phase.state not in ("waiting", "updating") or waited < self.timeout_s:
            return None
        if phase.state == "updating":
            return f"the learner: its update to step {phase.step + 1} has run for {waited:.0f} s"
        return f"no batch for {waited:.0f} s at step {phase.step}: " + self._why_no_batch(buffer)

    def _why_no_batch(self, buffer: dict[str, Any]) -> str:
        in_flight, pending = buffer.get("games_in_flight", 0), buffer.get("groups_pending", 0)
        held = buffer.get("size", 0)
        if pending and not in_flight:
            return (
                f"an incomplete group: {pending} group(s) wait for games that are not being played "
                f"(the env sampler's groups and the buffer's disagree)"
            )
        if in_flight:
            return (
                f"the learner waits for {in_flight} training game(s) in flight that do not finish "
                f"({held} steps held, {pending} group(s) incomplete)"
            )
        return (
            f"admission: no training game in flight while the buffer holds {held} of the "
            f"{self.batch_size} steps a batch needs"
        )
