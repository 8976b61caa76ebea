"""Deprecated (kept for one release, with `register_game_analyses`): the names a plugin imported from here
now live in `unstable_core.games.players` (`ScriptedPlayer`) and `unstable_core.probes` (the rest).
Each is looked up on use, with a DeprecationWarning naming its new home."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED = {
    "ScriptedPlayer": "unstable_core.games.players",
    "Figure": "unstable_core.probes",
    "Policy": "unstable_core.probes",
    "Position": "unstable_core.probes",
    "ProbeResult": "unstable_core.probes",
    "measure": "unstable_core.probes",
    "player_policy": "unstable_core.probes",
    "uniform_policy": "unstable_core.probes",
    "ModelPolicy": "unstable_core.probes.model_policy",
    "run_probe": "unstable_core.eval.probes",
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'unstable_core.games.analysis' has no attribute {name!r}")
    warnings.warn(
        f"unstable_core.games.analysis.{name} moved to {home}.{name}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
