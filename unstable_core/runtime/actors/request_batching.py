"""Many games' calls to one actor in one Ray call.

A Ray actor call costs a few hundred microseconds of CPU on each side, more than a whole turn of the game
loop. The games of a collector are coroutines of one event loop: the calls they make in one pass of the
loop go to the actor together (`InferenceActor.generate_many`, `RecorderActor.add_games`, ...), and each
game gets its own answer (or its own exception) back. The backend still batches requests as it would
single calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from unstable_core.inference.base import GenerationOutput, GenerationRequest

T = TypeVar("T")


class PassBatch(Generic[T]):
    """The items submitted in one event-loop pass, sent with one `send(items)`; it answers with one result
    per item, an exception in the place of an item that failed."""

    def __init__(self, send: Callable[[list[T]], Awaitable[Sequence[Any]]]) -> None:
        self.send = send
        self.calls = 0  # calls made
        self.items = 0  # items sent in them
        self._pending: list[tuple[T, asyncio.Future]] = []
        self._sending: set[asyncio.Task] = set()

    async def submit(self, item: T) -> Any:
        """The answer for `item`; raises what the call raised (a dead actor: its Ray error)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        pending = [(r, f) for r, f in pending if not f.done()]  # callers cancelled meanwhile
        if pending:
            task = asyncio.ensure_future(self._send(pending))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, pending: list[tuple[T, asyncio.Future]]) -> None:
        self.calls += 1
        self.items += len(pending)
        try:
            answers = await self.send([r for r, _ in pending])
        except Exception as exc:
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), answer in zip(pending, answers, strict=True):
            if future.done():
                continue
            if isinstance(answer, BaseException):
                future.set_exception(answer)
            else:
                future.set_result(answer)


class ActorRequests(PassBatch[GenerationRequest]):
    """The generation requests for one actor handle that has `generate_many`."""

    def __init__(self, actor: Any) -> None:
        super().__init__(lambda requests: actor.generate_many.remote(requests))
        self.actor = actor

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        return await self.submit(request)


def answer_each(fn: Callable[..., Any], items: Sequence[Any]) -> list[Any]:
    """The actor's side of a batched call: `fn(item)` for each item in order, an item that raised getting
    its exception in its place (the others are still done)."""
    answers: list[Any] = []
    for item in items:
        try:
            answers.append(fn(item))
        except Exception as exc:
            answers.append(exc)
    return answers
