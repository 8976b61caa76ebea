"""The learner's arithmetic: float32 on CPU, or (`learner_autocast`) its decoder passes under bfloat16
autocast: a step 1.6x faster on a CPU with avx512_bf16 in one micro-batch of 20 states, 1.2x in micro-batches
of 4 (autocast casts the frozen weights again in each; benchmarks/learner_autocast.py). A CPU without
bfloat16 kernels (AVX2 only) would emulate it many times slower, so there the option falls back to float32.
The trainable weights, their gradients and the optimizer stay float32, and so does the LM head
(`batch.head_logprobs`), so that the log-probs keep their precision where they are read."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any


def native_bf16() -> bool:
    """Whether oneDNN has bfloat16 kernels on this CPU (AVX-512 or AMX on x86, BF16 on ARM). Without them
    autocast emulates bf16: on an AVX2 EPYC the TicTacToe recipe took about 290 s of wall an update, against
    18.5 s on an EPYC with avx512_bf16."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def _device_type(device: Any) -> str:
    """'cpu' or 'cuda' of a torch.device or a name such as 'cuda:0'."""
    return str(getattr(device, "type", device)).split(":")[0]


def uses_autocast(enabled: bool, device: Any) -> bool:
    """Whether a learner on `device` runs under bfloat16 autocast: asked for, on CPU (a GPU learner's
    model is loaded in bfloat16 already), and a CPU with bfloat16 kernels."""
    return bool(enabled) and _device_type(device) == "cpu" and native_bf16()


def autocast_line(device: Any) -> str:
    """The line a run that asks for `learner_autocast` on `device` prints at start where it falls back; else ''."""
    if _device_type(device) != "cpu" or native_bf16():
        return ""
    return (
        "learner_autocast: this CPU has no bfloat16 kernels (oneDNN needs AVX-512 or AMX), so the learner "
        "runs in float32 (emulated bf16 would be many times slower)"
    )


def decoder_precision(autocast: bool) -> Any:
    """The context a learner's forwards (and the backward they feed) run in."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext()


def float32_only(device: Any) -> Any:
    """A context where no autocast applies on `device`'s type: the LM head's product stays float32."""
    import torch

    return torch.autocast(_device_type(device), enabled=False)
