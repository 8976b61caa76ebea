"""Adapters of another node, cached on this one: an inference actor never reads the run directory.

A request names its adapter by the folder the learner wrote (`GenerationRequest.lora_path`). The first
request for a folder asks the adapter store (`runtime/actors/adapter_store.py`, on the run directory's
node) for its files, once however many requests wait on it, and writes them atomically to a folder of
this process's own under the node's temporary directory; the request, and every later one for the same
adapter, is then served from there. The least recently used copies beyond `capacity` are removed, never
one that a request in flight uses; `close()` (and the process's exit) removes the whole folder, and an
actor that starts removes what actors that died without closing left behind.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import attrs

ROOT_NAME = "unstable-adapters"
RECORD_OPENS_ENV = "UNSTABLE_TEST_RECORD_OPENS"  # a folder: test hook, see `record_opens`

Fetch = Callable[[str], Awaitable["dict[str, bytes] | str"]]  # files of an adapter folder, or why not


def default_root() -> Path:
    """Where the caches of this node's inference actors live: `<temp dir>/unstable-adapters`."""
    return Path(tempfile.gettempdir()) / ROOT_NAME


def local_name(path: str) -> str:
    """The cached folder's name for adapter folder `path`: its own name and a hash of the whole path (two
    runs both have a `step-3`)."""
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    return f"{Path(path).name or 'adapter'}-{digest}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@attrs.define
class _Entry:
    local: Path
    users: int = 0  # requests in flight that use it


class AdapterCache:
    """Adapter folders by their path on the run directory's node -> copies in `root/<pid>-<random>/`."""

    def __init__(self, fetch: Fetch, capacity: int, root: str | os.PathLike | None = None) -> None:
        self.fetch = fetch
        self.capacity = max(1, int(capacity))
        base = Path(root) if root is not None else default_root()
        base.mkdir(parents=True, exist_ok=True)
        for old in base.iterdir():  # the caches of actors of this node that died without closing
            pid = old.name.partition("-")[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._fetching: dict[str, asyncio.Future] = {}
        self.fetches = 0  # adapters fetched from the store
        atexit.register(self.close)

    def local_paths(self) -> list[str]:
        """The cached folders, least recently used first."""
        return [str(e.local) for e in self._entries.values()]

    @contextlib.asynccontextmanager
    async def use(self, path: str | None) -> AsyncIterator[str | None]:
        """The local folder of adapter `path` for one request, kept while the request runs (None stays
        None). Raises AdapterUnavailable with the one line why it cannot be had."""
        if path is None:
            yield None
            return
        entry = await self._entry(path)
        entry.users += 1  # no await since `_entry` found it: nothing evicted it in between
        self._evict()
        try:
            yield str(entry.local)
        finally:
            entry.users -= 1
            self._evict()

    async def _entry(self, path: str) -> _Entry:
        while True:  # again after a fetch: what it fetched may have been evicted before this one woke
            entry = self._entries.get(path)
            if entry is not None and entry.local.is_dir():
                self._entries.move_to_end(path)
                return entry
            pending = self._fetching.get(path)
            if pending is None:  # the first request for it fetches; the others wait on that one fetch
                pending = self._fetching[path] = asyncio.ensure_future(self._fetch(path))
            await asyncio.shield(pending)

    async def _fetch(self, path: str) -> None:
        try:
            try:
                files = await self.fetch(path)
            except Exception as exc:  # the store died or could not send it: one line, the first of its own
                first = (str(exc).strip().splitlines() or [""])[0]
                raise AdapterUnavailable(
                    f"could not fetch the LoRA adapter {path!r} from the adapter store: {type(exc).__name__}: {first}"
                ) from exc
            if isinstance(files, str):
                raise AdapterUnavailable(files)
            local = self.dir / local_name(path)
            try:
                await asyncio.to_thread(write_folder, local, files)
            except OSError as exc:  # a full disk: this request fails, the next one tries again
                raise AdapterUnavailable(
                    f"could not copy the LoRA adapter {path!r} to {local}: {exc}"
                ) from exc
            self.fetches += 1
            self._entries[path] = _Entry(local)
        finally:  # before the waiters wake: a later request finds the entry or fetches anew
            self._fetching.pop(path, None)

    def _evict(self) -> None:
        """Remove the least recently used copies beyond the capacity that no request uses now."""
        for path in list(self._entries):
            if len(self._entries) <= self.capacity:
                return
            if self._entries[path].users == 0:
                shutil.rmtree(self._entries.pop(path).local, ignore_errors=True)

    def close(self) -> None:
        """Remove this cache's folder."""
        self._entries.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


class AdapterUnavailable(Exception):
    """An adapter that could not be had: the one line why."""


def write_folder(folder: Path, files: dict[str, bytes]) -> None:
    """`files` as `folder`, all at once: written to a temporary sibling, then renamed."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        for name, data in files.items():
            (tmp / Path(name).name).write_bytes(data)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def record_opens() -> None:
    """Test hook: with UNSTABLE_TEST_RECORD_OPENS set (a folder), every file this process opens through
    Python (an audit hook; native code's own opens, such as safetensors', are not seen) is appended to
    `<folder>/opens-<pid>.txt` as `<path>\t<mode>` (`open()`'s mode, or os.open's flags), after a first
    line with the Ray node's id. Nothing but the tests sets it."""
    folder = os.environ.get(RECORD_OPENS_ENV)
    if not folder:
        return
    try:
        import ray

        node = ray.get_runtime_context().get_node_id()
    except Exception:
        node = "?"
    log = open(Path(folder) / f"opens-{os.getpid()}.txt", "a", buffering=1)  # noqa: SIM115 (held open)
    log.write(f"node {node}\n")

    def hook(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            log.write(f"{os.fsdecode(args[0])}\t{args[1] if args[1] is not None else args[2]}\n")

    sys.addaudithook(hook)
