"""Inference backends (transformers, vLLM) behind one batched, async interface; see `base`."""

from unstable_core.inference.base import (
    GenerationOutput,
    GenerationRequest,
    InferenceBackend,
    SamplingParams,
)

__all__ = ["GenerationOutput", "GenerationRequest", "InferenceBackend", "SamplingParams"]
