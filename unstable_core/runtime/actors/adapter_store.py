"""The adapter store: the one actor that reads adapters from the run directory for inference.

It runs on the node that holds the run directory (the driver's: `runtime/launch/build.py`) and sends each
checkpoint's adapter, or an opponent's, as bytes through Ray's object store, so that inference actors on
other nodes need no shared filesystem: they cache what it sends on their own node
(`unstable_core.inference.adapter_cache`). It reads only what inference loads (the peft config and
weights, never optimizer or learner state), once per folder, and keeps the last few versions in Ray's
object store, where every inference actor fetches the same copy.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from unstable_core.inference.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_problem

ADAPTER_FILES = (ADAPTER_CONFIG, ADAPTER_WEIGHTS)  # what a backend loads from an adapter folder
KEEP = 16  # versions held in Ray's object store (twice the default max_loras); one dropped is read again


class AdapterStore:
    """Adapter files by folder path, read once and held as Ray objects, least recently used dropped."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._refs: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.reads = 0  # folders read from disk (a test counts them)

    def adapter(self, path: str) -> Any:
        """The ObjectRef of `{file name: bytes}` of the adapter folder `path`, or the one line why it is
        not an adapter folder (the caller fails its request with it)."""
        import ray

        ref = self._refs.get(path)
        if ref is None:
            problem = adapter_problem(path)
            if problem is not None:
                return problem
            ref = ray.put({name: (Path(path) / name).read_bytes() for name in ADAPTER_FILES})
            self.reads += 1
            self._refs[path] = ref
            while len(self._refs) > self.keep:  # Ray frees an object once no one holds its ref
                self._refs.popitem(last=False)
        self._refs.move_to_end(path)
        return ref

    def stats(self) -> dict[str, int]:
        return {"held": len(self._refs), "reads": self.reads}
