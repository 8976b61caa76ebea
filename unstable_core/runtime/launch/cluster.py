"""Starting Ray, or joining a running cluster by address with Ray's token authentication.

Ray 2.60 enables token authentication by default, but a driver joining by an explicit address
(`--ray-address IP:PORT`) does not turn it on by itself, even when it has the token: it then fails with
"InvalidAuthToken". Here a driver that has a token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
~/.ray/auth_token) and has not chosen a mode (RAY_AUTH_MODE) uses it.

A local cluster is started under a watchdog (`runtime/recovery/watchdog.py`): if the driver dies without stopping
it, every process of the cluster is killed at once, and the run's lock is let go only after that.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.runtime.recovery.watchdog import Watchdog

AUTH_MODE = "RAY_AUTH_MODE"
LOCAL_CPUS = 64  # logical CPUs Ray may hand out locally: every actor asks for 0, so this only bounds tasks
_watchdog: Watchdog | None = None  # of the local cluster this process started


def has_auth_token() -> bool:
    """Whether this process can present a Ray token (the places Ray's own loader reads)."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return bool(
        os.environ.get("RAY_AUTH_TOKEN")
        or (path and Path(path).is_file())
        or (Path.home() / ".ray" / "auth_token").is_file()
    )


def use_token_auth() -> None:
    """Turn on token authentication for this process (and what it starts), as Ray does for `auto`."""
    os.environ[AUTH_MODE] = "token"
    try:  # Ray caches its config: refresh it as its own enabling code does
        from ray._raylet import Config

        Config.initialize("")
    except ImportError:
        pass


def join_error(address: str, exc: BaseException) -> UnstableError:
    """One line for a failed connection: what failed and the fix (Ray reports a refused token only in its
    log lines, as a failure to connect, so the token is always named)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    token = (
        "that its token is the one this machine presents (RAY_AUTH_TOKEN or ~/.ray/auth_token)"
        if has_auth_token()
        else "its token: set RAY_AUTH_TOKEN"
    )
    return UnstableError(
        f"could not join the Ray cluster at {address}: {text}; check the address (`ray status` on the head "
        f"node prints it) and {token} (`ray get-auth-token` on the head node prints it)"
    )


def start_ray(address: str | None, hold_fds: Iterable[int] = (), **kwargs: Any) -> None:
    """`ray.init`: a local cluster (address None) or the cluster at `address` ("auto" or "IP:PORT").

    A local cluster gets a watchdog that kills it when this process dies; it holds `hold_fds` (the run's
    lock) until then. `stop_ray()` shuts the cluster down and ends the watchdog."""
    global _watchdog
    import ray

    if not address:
        end_watchdog()
        _watchdog = Watchdog.start(hold_fds)
        previous = _watchdog.mark()  # every process of the cluster carries the watchdog's token
        try:
            # "local": a cluster of our own even where `ray start` left one that ray.init would join
            ray.init(address="local", num_cpus=LOCAL_CPUS, **kwargs)
        except BaseException:
            end_watchdog()
            raise
        finally:
            Watchdog.unmark(previous)
        return
    if address != "auto" and AUTH_MODE not in os.environ and has_auth_token():
        use_token_auth()
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:  # ConnectionError, AuthenticationError, RuntimeError from the GCS client
        if ray.is_initialized():
            ray.shutdown()
        raise join_error(address, exc) from exc


def end_watchdog() -> None:
    """Stop guarding the local cluster: the watchdog kills what is left of it and lets go of the run's lock."""
    global _watchdog
    if _watchdog is not None:
        _watchdog.end()
        _watchdog = None


def stop_ray() -> None:
    """Shut Ray down (a local cluster with every process of it), then end the watchdog."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    end_watchdog()


def raise_interrupt(signum: int, frame: Any) -> None:
    """A SIGTERM handler, set after `ray.init` (which installs its own that dumps a stack trace and exits):
    a `kill` stops a command as Ctrl-C does, cleanly."""
    raise KeyboardInterrupt
