"""Coalescing concurrent async requests into batches: a short gather window, then one batch call.

The first request of a batch opens a window of `gather_s`; the batch closes when the window ends or
`max_batch_size` requests are in. Requests that queued while the previous batch ran have already
waited their window, so they leave at once. A failing batch becomes "error" outputs, never a crash.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from unstable_core.inference.messages import GenerationOutput, GenerationRequest
from unstable_core.inference.stats import ThroughputMeter

BatchRunner = Callable[[list[GenerationRequest]], Awaitable[list[GenerationOutput]]]


@attrs.define
class _Pending:
    request: Any
    future: asyncio.Future
    enqueued: float


class RequestBatcher:
    """A queue and a worker task that feeds `run_batch` with batches of up to `max_batch_size` requests."""

    def __init__(
        self,
        run_batch: BatchRunner,
        *,
        max_batch_size: int,
        gather_s: float,
        overlap: bool = False,
        meter: ThroughputMeter | None = None,
    ) -> None:
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.gather_s = gather_s
        self.overlap = overlap
        self.meter = meter
        self.running = 0
        self._queue: asyncio.Queue[_Pending] | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def queued(self) -> int:
        """Requests waiting for a batch."""
        return self._queue.qsize() if self._queue is not None else 0

    async def submit(self, request: GenerationRequest) -> GenerationOutput:
        """Queue `request` and wait for its output."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._start(loop)
        assert self._queue is not None
        future = loop.create_future()
        self._queue.put_nowait(_Pending(request, future, loop.time()))
        return await future

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        # A new event loop (asyncio.run called again) gets its own queue and worker.
        self._loop = loop
        self._queue = asyncio.Queue()
        self._worker = loop.create_task(self._work())

    async def _gather(self) -> list[_Pending]:
        assert self._queue is not None and self._loop is not None
        batch = [await self._queue.get()]
        deadline = batch[0].enqueued + self.gather_s
        while len(batch) < self.max_batch_size:
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                while len(batch) < self.max_batch_size and not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except asyncio.TimeoutError:
                break
        return [p for p in batch if not p.future.done()]  # drop callers that were cancelled

    async def _work(self) -> None:
        while True:
            batch = await self._gather()
            if not batch:
                continue
            if self.overlap:
                task = asyncio.create_task(self._dispatch(batch))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                await self._dispatch(batch)

    async def _dispatch(self, batch: list[_Pending]) -> None:
        requests = [p.request for p in batch]
        self.running += len(batch)
        clock = self.meter.clock if self.meter is not None else asyncio.get_running_loop().time
        start = clock()
        try:
            outputs = await self._run_batch(requests)
            if len(outputs) != len(requests):
                raise RuntimeError(
                    f"the backend returned {len(outputs)} outputs for {len(requests)} requests"
                )
        except asyncio.CancelledError:
            _fail(batch, "the backend was closed while this request ran")
            raise
        except Exception as exc:  # a broken batch fails its requests, not the loop
            message = f"batch of {len(requests)} failed: {type(exc).__name__}: {exc}"
            outputs = [GenerationOutput.failure(message) for _ in requests]
        finally:
            self.running -= len(batch)
        if self.meter is not None:
            end = clock()
            tokens = sum(len(o.token_ids) for o in outputs)
            errors = sum(o.finish_reason == "error" for o in outputs)
            self.meter.record_batch(len(outputs), tokens, errors, start, end)
        for pending, output in zip(batch, outputs, strict=True):
            if not pending.future.done():
                pending.future.set_result(output)

    async def close(self) -> None:
        """Stop the worker and answer every queued request with an error output."""
        if self._worker is not None and self._loop is asyncio.get_running_loop():
            self._worker.cancel()
            await asyncio.gather(self._worker, *self._tasks, return_exceptions=True)
        while self._queue is not None and not self._queue.empty():
            _fail([self._queue.get_nowait()], "the backend was closed before this request ran")
        self._worker = None


def _fail(batch: list[_Pending], message: str) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_result(GenerationOutput.failure(message))
