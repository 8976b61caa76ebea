"""A planned probe on a policy (`measure`), timed; an error the probe raises names it and its plugin. The
probes of `unstable eval`'s players (models, checkpoints, run directories, scripted players):
`unstable_core.eval.probes`."""

from __future__ import annotations

import time
from collections.abc import Sequence

from unstable_core.errors import ComponentFailed
from unstable_core.probes.base import Policy, Position
from unstable_core.probes.catalogue import AskedProbe, PlannedProbe, plan_probes
from unstable_core.probes.figures import ProbeResult


def measure(planned: PlannedProbe | str, policy: Policy, env_id: str | None = None) -> ProbeResult:
    """The probe on `policy`, with its wall time: a `PlannedProbe`, or a probe's name planned here (on
    `env_id`, else its default env). What the probe raises is one line naming it and its plugin; what
    the policy raises (a model, a scripted player) is its own."""
    if isinstance(planned, str):
        (planned,) = plan_probes([AskedProbe(planned, env_id)])
    raised: list[BaseException] = []

    def asked(positions: Sequence[Position]) -> list[dict[str, float]]:
        try:
            return policy(positions)
        except Exception as exc:  # the policy's own (a checkpoint that cannot be read): not the probe's
            raised.append(exc)
            raise

    started = time.perf_counter()
    try:
        result = planned.probe(asked, planned.env_id)
    except Exception as exc:
        if isinstance(exc, ComponentFailed) or any(exc is e for e in raised):
            raise
        raise planned.component.failed(exc) from exc
    result.wall_s = time.perf_counter() - started
    return result
