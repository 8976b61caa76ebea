"""The watchdog of a driver that starts a local Ray cluster (`unstable_core.runtime.recovery.watchdog`), on real
processes without Ray: a driver that holds a run lock starts the watchdog, marks two children (one in a
session of its own, as Ray's processes may be) and a third whose child has lost the mark (as Ray's agents
do when `setproctitle` overwrites their environment block), and is killed; they all go, then the lock."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from unstable_core.run_lock import lock_is_free
from unstable_core.runtime.recovery.watchdog import SNAPSHOT_S

# a marked process whose child does not carry the mark (as Ray's agents, whose setproctitle overwrites it)
# and which ends soon after, orphaning its child (as the kernel kills Ray's raylet with the driver, before
# the watchdog can look): the child is found only in the watchdog's list of the cluster's processes
UNMARKED_CHILD = (
    "import os, subprocess, sys, time; env = dict(os.environ); del env['UNSTABLE_RAY_SESSION']; "
    "print(subprocess.Popen(['sleep', '300'], env=env).pid, flush=True); time.sleep(float(sys.argv[1]))"
)

DRIVER = textwrap.dedent(
    """
    import subprocess, sys, time
    from unstable_core.run_lock import RunLock
    from unstable_core.runtime.recovery.watchdog import Watchdog

    lock = RunLock.acquire(sys.argv[1])
    dog = Watchdog.start([lock.fileno()])
    previous = dog.mark()
    children = [
        subprocess.Popen(["sleep", "300"]),
        subprocess.Popen(["sleep", "300"], start_new_session=True),
    ]
    parent = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[4]], stdout=subprocess.PIPE, text=True)
    lost_mark = int(parent.stdout.readline())
    Watchdog.unmark(previous)
    unmarked = subprocess.Popen(["sleep", "300"])  # started after the cluster: not the watchdog's
    print(dog.proc.pid, *[c.pid for c in children], unmarked.pid, parent.pid, lost_mark, flush=True)
    if sys.argv[2] == "end":
        for c in children + [parent]:
            c.kill()
            c.wait()
        dog.end()
        lock.release()
        print("ended", flush=True)
    time.sleep(300)
    """
)


def start_driver(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path), mode, UNMARKED_CHILD, str(SNAPSHOT_S + 0.5)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return proc, [int(p) for p in proc.stdout.readline().split()]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cleanup(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_driver_takes_its_marked_processes_along_and_then_lets_go_of_the_lock(tmp_path):
    proc, (dog, child, own_session, unmarked, parent, lost_mark) = start_driver(tmp_path, "kill")
    try:
        assert not lock_is_free(tmp_path)
        time.sleep(SNAPSHOT_S + 1.0)  # the watchdog has listed the cluster's processes; `parent` is gone
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while not lock_is_free(tmp_path):
            assert time.monotonic() < deadline, "the lock was never let go"
            time.sleep(0.01)
        # the lock goes last: by then every marked process is gone
        assert not alive(child) and not alive(own_session)
        assert not alive(parent) and not alive(lost_mark)  # a marked process's child goes with it
        assert alive(unmarked)  # started after the cluster: not killed
        psutil.Process(dog).wait(timeout=10)
    finally:
        cleanup([dog, child, own_session, unmarked, parent, lost_mark])


def test_end_stops_guarding_kills_what_is_left_and_frees_the_lock(tmp_path):
    proc, (dog, child, own_session, unmarked, parent, lost_mark) = start_driver(tmp_path, "end")
    try:
        assert proc.stdout.readline().strip() == "ended"
        assert lock_is_free(tmp_path) and not alive(dog)
        assert proc.poll() is None and alive(unmarked)  # the driver lives on
    finally:
        cleanup([proc.pid, dog, child, own_session, unmarked, parent, lost_mark])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_watchdog_ignores_the_signals_of_an_interrupt(tmp_path, signum):
    """Ctrl-C or a SIGTERM for the run must let it stop cleanly: the watchdog stays until the driver ends."""
    proc, (dog, child, own_session, unmarked, parent, lost_mark) = start_driver(tmp_path, "kill")
    try:
        os.kill(dog, signum)
        time.sleep(0.5)
        assert alive(dog) and alive(child) and not lock_is_free(tmp_path)
    finally:
        proc.kill()
        proc.wait()
        psutil.Process(dog).wait(timeout=10)
        cleanup([dog, child, own_session, unmarked, parent, lost_mark])
