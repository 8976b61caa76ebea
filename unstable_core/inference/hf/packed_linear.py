"""Frozen fp32 Linear layers on CPU, run by oneDNN on weights reordered once into its blocked layout.

On a 2-core AVX-512 EPYC torch's default fp32 kernel (MKL) reached a third of what oneDNN's linear on a
pre-packed weight does with the same fp32 arithmetic: 57 against 173 GFLOP/s at a decode step's shape,
about 100 against 237 at a training batch's. The transformers backend packs its layers (decode 1.4 to
1.7 times faster, benchmarks/rollout.py) and a LoRA learner its frozen base layers (an update about 1.5
times faster), whose input gradient dx = dy W runs on W^T packed. Only the order of the sums differs from
`F.linear` (about 1e-6 relative): the log-probs the backend records still match those the learner
recomputes (tests/test_packed_linear.py). Each packed copy costs as much memory as its weight.

A packed copy must never outlive the weight it copies. A weight replaced (another object) or written in
place by a tensor op (its `_version` moves) is packed again on the next call. A write through `.data` moves
no version (peft merges a LoRA into its base layer so: `weight.data += delta`), and a checksum that sees
every write would read the whole weight on every call, as much memory traffic as the product itself. So a
packed layer's weight becomes a `WatchedWeight` (the same Parameter object, its class swapped): reading or
setting its `.data` retires the packed copy for good, as an alias taken then may be written at any later
time, and that layer runs `F.linear` on the weight as it is (`pack_linear_layers` packs it again on
request). A weight of another Parameter subclass cannot be watched and is not packed. Writes past torch
altogether (through `.numpy()` or the raw storage) are not seen.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
import torch.nn.functional as F

DECODE_ROWS = 8  # the batch the packing is tuned for (any number of rows runs)


@functools.cache
def packing_available() -> bool:
    """Whether this torch build has oneDNN's packed linear and it agrees with `F.linear` here."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    try:
        probe = torch.Generator().manual_seed(0)  # not the global RNG: a seeded model must not see this probe
        weight, rows = torch.randn(48, 32, generator=probe), torch.randn(3, 32, generator=probe)
        got = apply_packed(rows, pack_weight(weight))
    except RuntimeError:
        return False
    return torch.allclose(got, F.linear(rows, weight), atol=1e-4)


_RAW_DATA = torch._C.TensorBase.data  # the `.data` descriptor of every tensor, unwatched


class WatchedWeight(torch.nn.Parameter):
    """The weight of a packed Linear: reading or setting `.data` (a write that moves no version) retires
    the packed copies made of it (`PackedForward.retire`); copies and pickles are plain Parameters."""

    @property
    def data(self) -> torch.Tensor:
        """The weight's tensor without autograd; the packed copies of it are dropped first."""
        self._retire()
        return _RAW_DATA.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        if value is not self:  # Module.to() sets a parameter's data to itself when it moves nothing
            self._retire()
        _RAW_DATA.__set__(self, value)

    def _retire(self) -> None:
        for ref in self.__dict__.get("_packed_by", ()):
            forward = ref()
            if forward is not None:
                forward.retire(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.nn.Parameter:
        if id(self) not in memo:
            data = _RAW_DATA.__get__(self).clone(memory_format=torch.preserve_format)
            memo[id(self)] = torch.nn.Parameter(data, self.requires_grad)
        return memo[id(self)]

    def __reduce_ex__(self, proto: Any) -> Any:
        return torch.nn.Parameter, (_RAW_DATA.__get__(self), self.requires_grad)


def _watch(weight: torch.Tensor, forward: PackedForward) -> bool:
    """Make `weight` a `WatchedWeight` that tells `forward` of `.data` access; False if it cannot be."""
    if type(weight) is torch.nn.Parameter:
        weight.__class__ = WatchedWeight
    if type(weight) is not WatchedWeight:
        return False
    weight.__dict__["_packed_by"] = [
        ref for ref in weight.__dict__.get("_packed_by", []) if ref() is not None and ref() is not forward
    ] + [weakref.ref(forward)]
    return True


def _unwatch(weight: torch.Tensor, forward: PackedForward) -> None:
    """`forward` no longer packs `weight`; a weight no forward watches is a plain Parameter again."""
    if type(weight) is not WatchedWeight:
        return
    left = [
        ref for ref in weight.__dict__.get("_packed_by", []) if ref() is not None and ref() is not forward
    ]
    weight.__dict__["_packed_by"] = left
    if not left:
        del weight.__dict__["_packed_by"]
        weight.__class__ = torch.nn.Parameter


class PackedForward:
    """The forward of one frozen `nn.Linear`: y = x W^T + b on a packed copy of W. Falls back to `F.linear`
    for anything the copy cannot serve: another dtype, a gradient to track, a weight changed since (then
    packed again) or one whose `.data` was touched (then never packed again: see the module docstring)."""

    def __init__(self, linear: torch.nn.Linear, pack_now: bool = True) -> None:
        self._linear = weakref.ref(linear)  # the module holds this forward: no reference cycle
        self._source: torch.Tensor | None = None  # the weight packed
        self._packed: torch.Tensor | None = None  # None with a _source: its `.data` was touched
        self._packed_t: torch.Tensor | None = None
        if pack_now:
            self._pack(linear.weight)

    def __deepcopy__(self, memo: dict[int, Any]) -> PackedForward:
        """The forward of the copied Linear (packed on its first call): never one reading the original."""
        copied = memo.get(id(self._linear()))
        if copied is None:
            raise TypeError("a PackedForward is copied only with its nn.Linear")
        return PackedForward(copied, pack_now=False)  # the copy has no weight yet

    def _pack(self, weight: torch.Tensor) -> None:
        if self._source is not None and self._source is not weight:
            _unwatch(self._source, self)
        self._source, self._version = weight, weight._version
        watched = _watch(weight, self)
        self._packed = pack_weight(weight.detach()) if watched else None
        self._packed_t = None  # W^T packed, made on the first backward pass needing it

    def retire(self, weight: torch.Tensor) -> None:
        """Drop the packed copies of `weight` for good: its `.data` was read or set, so it may change
        unseen; this layer then runs `F.linear` while `weight` is its weight."""
        if weight is self._source:
            self._packed = self._packed_t = None

    def release(self) -> None:
        """Drop the packed copies and stop watching the weight (`unpack_linear_layers`)."""
        if self._source is not None:
            _unwatch(self._source, self)
        self._source, self._packed, self._packed_t = None, None, None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        linear = self._linear()
        assert linear is not None, "a PackedForward outlived its Linear"
        weight, bias = linear.weight, linear.bias
        tracked = torch.is_grad_enabled() and (
            weight.requires_grad or (bias is not None and bias.requires_grad)
        )
        if x.dtype != torch.float32 or tracked:  # a weight being trained: torch's op and its gradients
            return F.linear(x, weight, bias)
        if weight is not self._source or weight._version != self._version:  # replaced or updated in place
            if weight is self._source and self._packed is None:  # its .data was touched: never again
                return F.linear(x, weight, bias)
            self._pack(weight)
        if self._packed is None:  # a weight that cannot be watched, or one whose .data was touched
            return F.linear(x, weight, bias)
        if torch.is_grad_enabled() and x.requires_grad:  # a frozen layer inside a model being trained
            if self._packed_t is None:
                self._packed_t = pack_weight(weight.detach().t().contiguous())
            return _FrozenPackedLinear.apply(x, bias, self._packed, self._packed_t)
        return apply_packed(x, self._packed, bias)


class _FrozenPackedLinear(torch.autograd.Function):
    """y = x W^T + b for a frozen W and b: the forward on W packed, the backward dx = dy W on W^T packed
    (a Linear from the outputs back to the inputs)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, bias: Any, packed: torch.Tensor, packed_t: torch.Tensor) -> Any:
        ctx.packed_t = packed_t
        return apply_packed(x, packed, bias)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, None, None, None]:
        return apply_packed(dy.contiguous(), ctx.packed_t), None, None, None


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A Linear weight [out, in] reordered into oneDNN's blocked layout, for `apply_packed`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, DECODE_ROWS)


def apply_packed(x: torch.Tensor, packed: torch.Tensor, bias: Any = None) -> torch.Tensor:
    """x W^T + b with W packed by `pack_weight` (no autograd)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def pack_linear_layers(model: Any, frozen_only: bool = False) -> int:
    """Give every fp32 CPU `nn.Linear` of `model` (the LM head included) a `PackedForward`, or with
    `frozen_only` those whose weight needs no gradient (a LoRA learner's base layers); the number packed, 0
    where this torch cannot. The modules keep their type and weight objects (now `WatchedWeight`s), so peft
    wraps them as usual."""
    if not packing_available():
        return 0
    packed = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if (
            type(module) is torch.nn.Linear
            and type(weight) in (torch.nn.Parameter, WatchedWeight)  # one that `.data` access can retire
            and weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and not (frozen_only and weight.requires_grad)
        ):
            module.forward = PackedForward(module)
            packed += 1
    return packed


def unpack_linear_layers(model: Any) -> int:
    """Undo `pack_linear_layers`: torch's own forward again, the packed copies released; how many."""
    unpacked = 0
    for module in model.modules():
        forward = module.__dict__.get("forward")
        if isinstance(forward, PackedForward):
            forward.release()
            del module.forward
            unpacked += 1
    return unpacked
