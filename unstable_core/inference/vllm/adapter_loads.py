"""The adapters an asynchronous engine (vLLM) has loaded, each under an integer id, and the loads under way.

Requests for an adapter arrive concurrently on one event loop, and loading it takes awaits: two first
requests for one adapter must share one load. Two loads would register it twice under two ids, of which
the bookkeeping keeps one: the other stays loaded in the engine for good, never used nor unloaded.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

from unstable_core.inference.adapters import AdapterLRU, AdapterSlot


class AdapterLoads:
    """Loaded adapters by path (least recently used beyond `capacity` unloaded), each with a fresh integer
    id per version, through the engine's `add(slot, path)` and `remove(handle)` coroutines; at most one load
    per path at a time, whose result (or error) every concurrent request for that version shares."""

    def __init__(
        self,
        capacity: int,
        add: Callable[[AdapterSlot, str], Awaitable[None]],
        remove: Callable[[int], Awaitable[None]],
    ) -> None:
        self.lru = AdapterLRU(capacity)
        self._add, self._remove = add, remove
        self._ids = itertools.count(1)  # vLLM reserves 0
        self._loading: dict[str, tuple[int, asyncio.Future[AdapterSlot]]] = {}

    async def slot(self, path: str, version: int) -> AdapterSlot:
        """The slot of the adapter at `path` in `version` (its weights' mtime), loaded if it is not: a stale
        version is unloaded first, and the least recently used beyond the capacity after. A load of the same
        version under way is awaited, not repeated; one of another version is let finish first."""
        while (pending := self._loading.get(path)) is not None:
            loading, future = pending
            if loading == version:
                return await asyncio.shield(future)  # a waiter cancelled does not cancel the load
            await asyncio.wait([future])
        slot = self.lru.touch(path)
        if slot is not None and slot.version == version:
            return slot
        future: asyncio.Future[AdapterSlot] = asyncio.get_running_loop().create_future()
        self._loading[path] = (version, future)
        try:
            slot = await self._load(path, version, stale=slot)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when no request waited on it
            raise
        else:
            future.set_result(slot)
            return slot
        finally:
            del self._loading[path]

    async def _load(self, path: str, version: int, stale: AdapterSlot | None) -> AdapterSlot:
        if stale is not None:  # the folder was rewritten: the engine must load it afresh, under a new id
            self.lru.remove(path)
            await self._remove(stale.handle)
        slot = AdapterSlot(handle=next(self._ids), version=version)
        await self._add(slot, path)
        self.lru.insert(path, slot)
        for _, old in self.lru.overflow(keep=(path,)):
            await self._remove(old.handle)
        return slot
