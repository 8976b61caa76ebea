"""Exact yardsticks and scripted players a game ships, registered through `register_game_analyses`.

- Scripted players (`kind="player"`): opponents played by code, wherever `random` is one. Built in:
  `random` (`games.random_player`), TicTacToe's `optimal` and `heuristic` (`tictactoe`).
- Probes (`kind="probe"`): a policy's figures at fixed positions of a game, reached in a real env and
  prompted as a run prompts them (`probe.Position`, `probe.ProbeResult`). Built in: `kuhn-exploitability`
  (`kuhn`, with OpenSpiel) and `tictactoe-tactics` (`tactics`).

From Python: `measure(name, policy)` on any policy (`model_policy.ModelPolicy`, `probe.uniform_policy`,
`probe.player_policy`); on a model, checkpoint or run directory, `unstable_core.eval.probes.run_probe` (its name here
is deprecated). Importing this package stays light (no torch): the modules that need it are imported on use.
"""

from __future__ import annotations

from typing import Any

from unstable_core.games.analysis.probe import (
    Figure,
    Policy,
    Position,
    ProbeResult,
    player_policy,
    uniform_policy,
)
from unstable_core.games.random_player import ScriptedPlayer

__all__ = [
    "Figure",
    "ModelPolicy",
    "Policy",
    "Position",
    "ProbeResult",
    "ScriptedPlayer",
    "measure",
    "player_policy",
    "run_probe",
    "uniform_policy",
]

_LAZY = {"measure": "measuring", "ModelPolicy": "model_policy"}
_MOVED = {"run_probe": "unstable_core.eval.probes"}  # announced here for one release


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(f"unstable_core.games.analysis.{_LAZY[name]}"), name)
    if name in _MOVED:
        import warnings

        warnings.warn(
            f"unstable_core.games.analysis.{name} moved to unstable_core.eval.probes.{name}; the old name goes in the "
            "next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'unstable_core.games.analysis' has no attribute {name!r}")
