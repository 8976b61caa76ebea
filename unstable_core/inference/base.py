"""The inference contract: sampling parameters, requests, outputs, and the backend base class.

A backend implements `generate_batch` (one synchronous batch); the base class turns concurrent
`generate` calls into such batches (a short gather window, like UnstableBaselines v0.2's 20 ms loop).
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.inference.batching import RequestBatcher
from unstable_core.inference.messages import (
    FINISH_REASONS,
    GenerationOutput,
    GenerationRequest,
    SamplingParams,
    token_budget,
)
from unstable_core.inference.stats import ThroughputMeter

__all__ = [
    "FINISH_REASONS",
    "GenerationOutput",
    "GenerationRequest",
    "InferenceBackend",
    "SamplingParams",
    "token_budget",
]


class InferenceBackend(abc.ABC):
    """A model that completes token prompts, batching concurrent `generate` calls."""

    #: True when batches may run concurrently (an engine with its own continuous batching)
    overlap_batches: bool = False

    def __init__(
        self,
        model: str,
        *,
        max_batch_size: int = 32,
        gather_ms: float = 20.0,
        max_loras: int = 8,
        max_model_len: int = 4096,
        device: str | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise UnstableError(
                f"{type(self).__name__} got unknown options {sorted(kwargs)}; remove them from the backend config"
            )
        for name, value in (
            ("max_batch_size", max_batch_size),
            ("max_loras", max_loras),
            ("max_model_len", max_model_len),
        ):
            if int(value) < 1:
                raise UnstableError(f"{name} must be >= 1, got {value}")
        if gather_ms < 0:
            raise UnstableError(f"gather_ms must be >= 0, got {gather_ms}")
        self.model_name = model
        self.max_batch_size = int(max_batch_size)
        self.gather_ms = float(gather_ms)
        self.max_loras = int(max_loras)
        self.max_model_len = int(max_model_len)
        self.device = device
        self.meter = ThroughputMeter()
        self._batcher = RequestBatcher(
            self._run_batch,
            max_batch_size=self.max_batch_size,
            gather_s=self.gather_ms / 1000.0,
            overlap=self.overlap_batches,
            meter=self.meter,
        )
        self._closed = False

    @property
    @abc.abstractmethod
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer of the model."""

    @abc.abstractmethod
    def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Complete one batch synchronously; one output per request, in order."""

    async def _run_batch(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Run one gathered batch in a worker thread, so the event loop keeps accepting requests."""
        return await asyncio.to_thread(self.generate_batch, requests)

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        """Complete one request; concurrent callers are coalesced into batches (never raises for a bad batch)."""
        if self._closed:
            raise UnstableError(f"{type(self).__name__} is closed; create a new backend")
        if not isinstance(request, GenerationRequest):
            raise UnstableError(f"generate() takes a GenerationRequest, got {type(request).__name__}")
        return await self._batcher.submit(request)

    def stats(self) -> dict[str, float]:
        """Queue and throughput figures: queued, running, tokens_per_s (moving), totals, batch sizes."""
        return {
            "queued": float(self._batcher.queued),
            "running": float(self._batcher.running),
            **self.meter.stats(),
        }

    async def close(self) -> None:
        """Fail what is still queued, stop the batching loop and release the model."""
        self._closed = True
        await self._batcher.close()
        self._release()

    @abc.abstractmethod
    def _release(self) -> None:
        """Free the model's memory."""
