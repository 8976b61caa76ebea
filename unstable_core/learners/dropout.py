"""Reference passes without dropout: pi_old, the base model's log-probs and importance weights are values of
the policy, not of one random dropout mask (at lora_dropout 0.1 a train-mode pi_old was off by a factor
0.79-1.44 per token, so PPO clipped before it had learned anything). The gradient-carrying forward of a loss
may keep dropout; these gradient-free passes run in eval mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def has_dropout(model: Any) -> bool:
    """Whether `model` in train mode drops anything: a dropout module with p > 0 (LoRA's, GPT-2's) or a
    config dropout rate > 0 that attention applies functionally (Llama's attention_dropout)."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0:
            return True
        config = getattr(module, "config", None)
        to_dict = getattr(config, "to_dict", None)
        if to_dict is None:
            continue
        for key, value in to_dict().items():
            rate = isinstance(value, (int, float)) and not isinstance(value, bool)
            if rate and ("dropout" in key or "pdrop" in key) and value > 0:
                return True
    return False


@contextmanager
def reference_mode(model: Any) -> Iterator[None]:
    """Gradient-free forwards of `model` in eval mode (no dropout); its train/eval mode is restored after."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)
