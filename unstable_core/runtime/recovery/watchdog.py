"""A watchdog of the process that starts a local Ray cluster (the driver): when the driver dies without
stopping the cluster (`kill -9`, the OOM killer), every process of that cluster is killed at once, and
only then is the run's lock (`RUN_DIR/.lock`) let go. Ray alone leaves its agents running for good and its
actors writing into the run folder for a second or more after the driver is gone.

Every process the cluster starts carries a random token in its environment (`MARK_ENV`, set while Ray
starts, inherited by the GCS, the raylet, the agents and every worker the raylet spawns later), so the
watchdog finds them in `/proc/*/environ` whoever their parent now is. Ray's agents overwrite their
environment block (`setproctitle`), and the kernel kills the GCS and the raylet with the driver (Ray sets
their parent-death signal), which orphans the agents before the watchdog can look; so while it guards, the
watchdog also keeps the list of the marked processes and their descendants (`SNAPSHOT_S`), and kills
those of that list that still run (the same pid with the same start time) as well. The watchdog holds a duplicate of
the lock's file descriptor: `flock` is let go only when both the driver and the watchdog have closed it.

This file is also the watchdog's program (standard library only, started as a script):
`python -I watchdog.py DRIVER_PID TOKEN CONTROL_FD [HELD_FD...]`. On the control pipe the driver writes
`end` (stop guarding: kill what is left of the cluster, which `ray.shutdown()` has stopped, and exit);
end-of-file or a changed parent means the driver died: kill every marked process, then exit.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

MARK_ENV = "UNSTABLE_RAY_SESSION"
POLL_S = 0.2  # how often the watchdog also checks that its parent is still the driver
SNAPSHOT_S = 1.0  # how often it lists the cluster's processes while the driver lives
KILL_WITHIN_S = 10.0  # the watchdog gives up killing (and exits, releasing the lock) after this long


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live, non-zombie process; None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the name, in parentheses, may hold spaces
    except OSError:
        return None
    return None if fields[0] in (b"Z", b"X") else (int(fields[1]), int(fields[19]))


def still_running(known: dict[int, int]) -> list[int]:
    """The pids of `known` that still run as the same process (same start time: not a reused pid)."""
    return [pid for pid, started in known.items() if (stat := _stat(pid)) is not None and stat[1] == started]


def marked_processes(token: str, exclude: Iterable[int] = ()) -> dict[int, int]:
    """The live processes whose environment carries `MARK_ENV=token`, and their descendants, as pid -> start
    time (the watchdog's list of the cluster, and what it kills).

    Descendants count because a process may overwrite its own environment block: Ray's agents set their
    title with `setproctitle`, which clobbers what `/proc/PID/environ` shows, so only their parent (the
    raylet) is found by its mark."""
    needle = f"{MARK_ENV}={token}".encode()
    skip = set(exclude)
    stats: dict[int, tuple[int, int]] = {}  # pid -> (parent pid, start time)
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip or (stat := _stat(int(name))) is None:
            continue
        stats[int(name)] = stat
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.add(int(name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    grew = True
    while grew:  # close over children: a child of a marked process is the cluster's too
        more = {pid for pid, (parent, _) in stats.items() if parent in found and pid not in found}
        found |= more
        grew = bool(more)
    return {pid: stats[pid][1] for pid in sorted(found)}


def kill_marked(
    token: str,
    exclude: Iterable[int] = (),
    within_s: float = KILL_WITHIN_S,
    known: dict[int, int] | None = None,
) -> int:
    """SIGKILL every marked process (and those of `known`, an earlier `marked_processes`, that still run), again until none
    is left (a raylet may spawn a worker meanwhile) and every one killed is gone or a zombie, or `within_s`
    passed; returns how many were still alive then."""
    deadline = time.monotonic() + within_s
    killed: set[int] = set()
    skip = set(exclude)
    while True:
        pids = sorted(
            set(marked_processes(token, skip)) | {p for p in still_running(known or {}) if p not in skip}
        )
        dying = [pid for pid in killed if _stat(pid) is not None]  # a SIGKILL takes a moment to land
        if not pids and not dying or time.monotonic() > deadline:
            return len(set(pids) | set(dying))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed.update(pids)
        time.sleep(0.02)


class Watchdog:
    """The driver's handle of its watchdog process."""

    def __init__(self, proc: subprocess.Popen, control_fd: int, token: str) -> None:
        self.proc, self.token = proc, token
        self._control: int | None = control_fd

    @classmethod
    def start(cls, hold_fds: Iterable[int] = ()) -> Watchdog:
        """Start the watchdog of this process and mark the processes it starts from now on (see `mark`)."""
        import secrets

        token = secrets.token_hex(8)
        read_end, write_end = os.pipe()  # the driver's end is not inherited by anything it starts
        held = [int(fd) for fd in hold_fds]
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), token, str(read_end)]
                + [str(fd) for fd in held],
                pass_fds=(read_end, *held),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                start_new_session=True,  # a kill of the driver's process group does not take it along
            )
        finally:
            os.close(read_end)
        ready = proc.stdout.readline()  # it guards from now on (and ignores an interrupt's signals)
        proc.stdout.close()
        if ready != b"ready\n":
            os.close(write_end)
            raise RuntimeError(f"the run's watchdog did not start (exit status {proc.wait()})")
        return cls(proc, write_end, token)

    def mark(self) -> str | None:
        """Put the token into this process's environment, so that what it starts now inherits it; returns
        the previous value (for `unmark`)."""
        previous = os.environ.get(MARK_ENV)
        os.environ[MARK_ENV] = self.token
        return previous

    @staticmethod
    def unmark(previous: str | None) -> None:
        """Processes started from now on are not the cluster's."""
        if previous is None:
            os.environ.pop(MARK_ENV, None)
        else:
            os.environ[MARK_ENV] = previous

    def end(self, timeout_s: float = KILL_WITHIN_S + 5.0) -> None:
        """Stop guarding: the watchdog kills what is left of the cluster, lets go of what it holds and exits
        (waited for, so that the lock is free when this returns). Idempotent."""
        if self._control is None:
            return
        with contextlib.suppress(OSError):  # it died already
            os.write(self._control, b"end\n")
        os.close(self._control)
        self._control = None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _watch(driver: int, token: str, control: int, held: list[int]) -> None:
    """The watchdog's loop: wait for `end` or the driver's death, then kill the cluster's processes."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # its life is the driver's: only that ends it
        signal.signal(sig, signal.SIG_IGN)
    print("ready", flush=True)
    received = b""
    known: dict[int, int] = {}
    listed_at = 0.0
    while os.getppid() == driver:
        if time.monotonic() - listed_at >= SNAPSHOT_S:
            known.update(marked_processes(token, exclude=(os.getpid(), driver)))
            listed_at = time.monotonic()
        ready, _, _ = select.select([control], [], [], POLL_S)
        if not ready:
            continue
        chunk = os.read(control, 64)
        if not chunk:  # end of file: the driver is gone
            break
        received += chunk
        if b"end\n" in received:
            kill_marked(token, exclude=(os.getpid(), driver), known=known)  # what ray.shutdown() left
            return
    kill_marked(token, exclude=(os.getpid(),), known=known)
    for fd in held:  # only now may another process take the run folder
        os.close(fd)


if __name__ == "__main__":
    pid_arg, token_arg, control_arg, *held_args = sys.argv[1:]
    _watch(int(pid_arg), token_arg, int(control_arg), [int(a) for a in held_args])
