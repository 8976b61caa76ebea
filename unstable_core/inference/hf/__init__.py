"""The transformers backend (`backend.TransformersBackend`, also importable from here) and its internals: the
prefix cache of prompt blocks, prefill in groups of similar width, oneDNN-packed Linear layers on CPU, the
KV cache, the pool of peft adapters."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "TransformersBackend":  # imported on first use: the internals alone need no backend
        from unstable_core.inference.hf.backend import TransformersBackend

        return TransformersBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
