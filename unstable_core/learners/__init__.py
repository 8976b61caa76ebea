"""Learners: `BaseLearner` (LoRA model, micro-batching, clipping, checkpoints) and the helpers algorithms use.

The names below are imported on first use, so that importing one light module of this package does not
import `base` (and torch with it). `DEFAULT_LORA_CFG` is the LoRA settings' default, `unstable_core.config.lora`'s.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "DEFAULT_LORA_CFG": "unstable_core.config.lora",
    "POLICY_ADAPTER": "base",
    "BaseLearner": "base",
    "LearnerConfig": "settings",
    "TokenBatch": "batch",
    "collate": "batch",
    "completion_logprobs": "batch",
    "head_logprobs": "batch",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home if "." in home else f"{__name__}.{home}"), name)
