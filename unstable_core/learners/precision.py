"""The learner's arithmetic: float32 on CPU, or (`learner_autocast`) its decoder passes under bfloat16
autocast: a step 1.6x faster on a CPU with avx512_bf16 in one micro-batch of 20 states, 1.2x in micro-batches
of 4 (autocast casts the frozen weights again in each; benchmarks/learner_autocast.py).
The trainable weights, their gradients and the optimizer stay float32, and so does the LM head
(`batch.head_logprobs`), so that the log-probs keep their precision where they are read."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any


def uses_autocast(enabled: bool, device: Any) -> bool:
    """Whether a learner on `device` runs under bfloat16 autocast: asked for, and on CPU (a GPU learner's
    model is loaded in bfloat16 already)."""
    return bool(enabled) and str(getattr(device, "type", device)).startswith("cpu")


def decoder_precision(autocast: bool) -> Any:
    """The context a learner's forwards (and the backward they feed) run in."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext()


def float32_only(device: Any) -> Any:
    """A context where no autocast applies on `device`'s type: the LM head's product stays float32."""
    import torch

    return torch.autocast(str(getattr(device, "type", device)).split(":")[0], enabled=False)
