"""Frozen fp32 Linear layers on CPU, run by oneDNN on weights reordered once into its blocked layout.

At decode shapes (a few rows against every weight of the model) torch's default fp32 kernel (MKL) streams
the weights at a fraction of what the memory allows; oneDNN's linear on a pre-packed weight runs the same
fp32 arithmetic 2.4 times faster on the embedded model (benchmarks/rollout.py, rows a) and a'')). Only
the order of the sums differs from `F.linear` (about 1e-6 relative), so the log-probs the backend records
still match those the learner recomputes (tests/test_packed_linear.py). For inference only: the packed op
has no autograd, and a packed copy costs as much memory as the weight (538 MB for SmolLM2-135M).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn.functional as F

DECODE_ROWS = 8  # the batch the packing is tuned for (any number of rows runs)


def packing_available() -> bool:
    """Whether this torch build has oneDNN's packed linear and it agrees with `F.linear` here."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    try:
        weight, rows = torch.randn(48, 32), torch.randn(3, 32)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, DECODE_ROWS)
        got = torch.ops.mkldnn._linear_pointwise(rows, packed, None, "none", [], "")
    except RuntimeError:
        return False
    return torch.allclose(got, F.linear(rows, weight), atol=1e-4)


class PackedForward:
    """The forward of one frozen `nn.Linear`: y = x W^T + b on a packed copy of W. Falls back to `F.linear`
    for anything the copy cannot serve: another dtype, a gradient to track, or a weight changed since."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        self._linear = weakref.ref(linear)  # the module holds this forward: no reference cycle
        self._pack(linear.weight)

    def _pack(self, weight: torch.Tensor) -> None:
        self._source, self._version = weight, weight._version
        with torch.no_grad():
            self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), DECODE_ROWS)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        linear = self._linear()
        assert linear is not None, "a PackedForward outlived its Linear"
        weight, bias = linear.weight, linear.bias
        if x.dtype != torch.float32 or (
            torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
        ):
            return F.linear(x, weight, bias)
        if weight is not self._source or weight._version != self._version:  # replaced or updated in place
            self._pack(weight)
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, bias, "none", [], "")


def pack_linear_layers(model: Any) -> int:
    """Give every fp32 CPU `nn.Linear` of `model` (the LM head included) a `PackedForward`; the number
    packed, 0 where this torch cannot. The modules keep their type and weights, so peft wraps them as usual."""
    if not packing_available():
        return 0
    packed = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if type(module) is torch.nn.Linear and weight.device.type == "cpu" and weight.dtype == torch.float32:
            module.forward = PackedForward(module)
            packed += 1
    return packed


def unpack_linear_layers(model: Any) -> int:
    """Undo `pack_linear_layers`: torch's own forward again, the packed copies released; how many."""
    unpacked = 0
    for module in model.modules():
        if isinstance(module.__dict__.get("forward"), PackedForward):
            del module.forward
            unpacked += 1
    return unpacked
