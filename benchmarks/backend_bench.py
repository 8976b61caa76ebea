"""Throughput of a backend: all prompts submitted at once, so the backend batches them as it would live."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from unstable_core.errors import UnstableError
from unstable_core.inference.base import GenerationRequest, InferenceBackend, SamplingParams


def measure_backend_throughput(
    backend: InferenceBackend,
    prompts: Sequence[str | Sequence[int]],
    max_tokens: int,
    *,
    temperature: float = 0.6,
    seed: int = 0,
) -> float:
    """Generated tokens per wall-clock second over `prompts` (text, or token ids), sent concurrently.

    Not for use inside a running event loop (it runs its own). Raises UnstableError if a request fails.
    """
    if not prompts:
        raise UnstableError("measure_backend_throughput needs at least one prompt")
    requests = [
        GenerationRequest(
            prompt_ids=backend.tokenizer.encode(p) if isinstance(p, str) else p,
            params=SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed + i),
        )
        for i, p in enumerate(prompts)
    ]

    async def run_all() -> list:
        return await asyncio.gather(*(backend.generate(r) for r in requests))

    started = time.perf_counter()
    outputs = asyncio.run(run_all())
    elapsed = time.perf_counter() - started
    failed = [o.error for o in outputs if o.finish_reason == "error"]
    if failed:
        raise UnstableError(f"{len(failed)} of {len(outputs)} benchmark requests failed; first: {failed[0]}")
    return sum(len(o.token_ids) for o in outputs) / elapsed
