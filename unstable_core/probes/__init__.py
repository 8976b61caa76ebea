"""Probes: exact yardsticks of a policy at fixed positions of a game, registered through `register_probes`.

- `base`: the `Probe` protocol, `Position` (reached in a real env: `position_after`), `Policy` and the
  fixed policies (`uniform_policy`, `player_policy`); `figures`: `Figure` and `ProbeResult`.
- `catalogue`: the registered probes; `NAME[:ENV]` parsed and checked once (`plan_probes`).
- `measuring`: `measure(planned, policy)`; `model_policy`: a model (or a checkpoint on it) as a policy.
- Built in: `kuhn_exploitability` (OpenSpiel) and `tictactoe_tactics`.
On a model, checkpoint or run directory: `unstable_core.eval.probes.run_probe`. Importing this package
stays light (no torch).
"""

from unstable_core.probes.base import Policy, Position, Probe, player_policy, position_after, uniform_policy
from unstable_core.probes.figures import Figure, ProbeResult
from unstable_core.probes.measuring import measure

__all__ = [
    "Figure",
    "Policy",
    "Position",
    "Probe",
    "ProbeResult",
    "measure",
    "player_policy",
    "position_after",
    "uniform_policy",
]
