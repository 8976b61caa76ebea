"""One process per run directory: `RUN_DIR/.lock`, held with `fcntl.flock` for the run's lifetime and taken
before anything is written, by a new run and by `--resume` alike. The kernel drops the lock when its
process dies, so a killed run never leaves a stale one behind. A local Ray cluster's watchdog holds a
duplicate of the lock's descriptor (`runtime/recovery/watchdog.py`): after a kill of the run, the lock is let go
only once every process of the run is gone."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from unstable_core.errors import ConfigError

LOCK_NAME = ".lock"


class RunLock:
    """The held lock of a run directory; `release()` (or the process's end) lets another process in."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd
        self._on_release: list[Callable[[], None]] = []

    @classmethod
    def acquire(cls, run_dir: str | os.PathLike) -> RunLock:
        """Lock `run_dir` for this process, or raise ConfigError naming the process that holds it."""
        path = Path(run_dir) / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(
                f"run directory {str(Path(run_dir))!r} is in use by pid {holder} (the run, or a --resume of "
                "it, is still going): wait for it to end or stop it, then resume it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def fileno(self) -> int:
        """The locked descriptor (a process given a duplicate holds the lock as well)."""
        if self._fd is None:
            raise ValueError("the run lock was released")
        return self._fd

    def on_release(self, callback: Callable[[], None]) -> None:
        """Call `callback` on `release()`, before the lock is let go (to end another holder of it)."""
        self._on_release.append(callback)

    def release(self) -> None:
        """Let another process take the run directory (the file stays: removing it would race a taker)."""
        while self._on_release:
            self._on_release.pop()()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_is_free(run_dir: str | os.PathLike) -> bool:
    """Whether no process holds the run's lock now (it is tried, and released at once)."""
    fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
