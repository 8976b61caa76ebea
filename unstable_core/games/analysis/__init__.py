"""Exact yardsticks and scripted players a game ships, registered through `register_game_analyses`.

- Scripted players (`kind="player"`): opponents played by code, wherever `random` is one. Built in:
  `random` (`games.random_player`), TicTacToe's `optimal` and `heuristic` (`tictactoe`).
- Probes (`kind="probe"`): a policy's figures at fixed positions of a game, reached in a real env and
  prompted as a run prompts them (`probe.Position`, `probe.ProbeResult`). Built in: `kuhn-exploitability`
  (`kuhn`, with OpenSpiel) and `tictactoe-tactics` (`tactics`).

From Python: `run_probe(name, model_or_checkpoint_or_run_dir)` (`run`), or `measure(name, policy)` on any
policy (`model_policy.ModelPolicy`, `probe.uniform_policy`, `probe.player_policy`). Importing this package
stays light (no torch): the modules that need it are imported on use.
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

_LAZY = {"measure": "run", "run_probe": "run", "ModelPolicy": "model_policy"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"unstable_core.games.analysis.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'unstable_core.games.analysis' has no attribute {name!r}")
