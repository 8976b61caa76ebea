"""Many games' requests to one inference actor in one Ray call.

A Ray actor call costs a few hundred microseconds of CPU on each side, more than a whole turn of the game
loop. The games of a collector are coroutines of one event loop: the requests they make in one pass of
the loop go to the actor together (`InferenceActor.generate_many`), and each game gets its own output
(or its own exception) back. The backend still batches them as it would single calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

from unstable_core.inference.base import GenerationOutput, GenerationRequest


class ActorRequests:
    """The requests for one actor handle that has `generate_many`, sent one event-loop pass at a time."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.calls = 0  # Ray calls made
        self.requests = 0  # requests sent in them
        self._pending: list[tuple[GenerationRequest, asyncio.Future]] = []
        self._sending: set[asyncio.Task] = set()

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        """The output of `request`; raises what the actor call raised (a dead actor: its Ray error)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((request, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        pending = [(r, f) for r, f in pending if not f.done()]  # games cancelled meanwhile
        if pending:
            task = asyncio.ensure_future(self._send(pending))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, pending: list[tuple[GenerationRequest, asyncio.Future]]) -> None:
        self.calls += 1
        self.requests += len(pending)
        try:
            outputs = await self.actor.generate_many.remote([r for r, _ in pending])
        except Exception as exc:
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), output in zip(pending, outputs, strict=True):
            if future.done():
                continue
            if isinstance(output, BaseException):
                future.set_exception(output)
            else:
                future.set_result(output)
