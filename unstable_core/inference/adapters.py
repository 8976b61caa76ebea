"""LoRA adapters by folder path: checking a folder, noticing a rewritten one, least-recently-used slots."""

from __future__ import annotations

import collections
from collections.abc import Collection
from pathlib import Path

import attrs

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def adapter_problem(path: str) -> str | None:
    """Why `path` is not a LoRA adapter folder saved by peft's `save_pretrained`, or None if it is one."""
    folder = Path(path)
    if not folder.is_dir():
        return f"LoRA adapter folder {path!r} does not exist; pass a folder written by peft's save_pretrained"
    for required in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not (folder / required).is_file():
            return f"LoRA adapter folder {path!r} has no {required}; save the adapter with peft's save_pretrained"
    return None


def adapter_version(path: str) -> int:
    """Modification time (ns) of the adapter weights: a changed value means the folder was rewritten."""
    return (Path(path) / ADAPTER_WEIGHTS).stat().st_mtime_ns


@attrs.frozen
class AdapterSlot:
    """A loaded adapter: the backend's handle for it (a peft adapter name or a vLLM id) and its file version."""

    handle: str | int
    version: int


class AdapterLRU:
    """Loaded adapters by path, least recently used first, with a capacity."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._slots: collections.OrderedDict[str, AdapterSlot] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, path: object) -> bool:
        return path in self._slots

    def paths(self) -> list[str]:
        """Loaded paths, least recently used first."""
        return list(self._slots)

    def slots(self) -> list[tuple[str, AdapterSlot]]:
        """Loaded paths and their slots, least recently used first (reading them uses none)."""
        return list(self._slots.items())

    def touch(self, path: str) -> AdapterSlot | None:
        """The slot of `path`, now the most recently used; None when not loaded."""
        slot = self._slots.get(path)
        if slot is not None:
            self._slots.move_to_end(path)
        return slot

    def insert(self, path: str, slot: AdapterSlot) -> None:
        """Record `path` as loaded and most recently used."""
        self._slots[path] = slot
        self._slots.move_to_end(path)

    def remove(self, path: str) -> AdapterSlot | None:
        """Forget `path`; its slot, for the caller to unload."""
        return self._slots.pop(path, None)

    def overflow(self, keep: Collection[str] = ()) -> list[tuple[str, AdapterSlot]]:
        """Remove and return least recently used entries beyond the capacity, never those in `keep`."""
        evicted = []
        for path in list(self._slots):
            if len(self._slots) <= self.capacity:
                break
            if path not in keep:
                evicted.append((path, self._slots.pop(path)))
        return evicted
