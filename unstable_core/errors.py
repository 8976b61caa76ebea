"""The error types of unstable: a message for a person, shown as one line with a non-zero exit status
(the traceback too under `unstable --debug` or UNSTABLE_DEBUG=1)."""

import os


class UnstableError(Exception):
    """A bad input or a broken setup, with a message that names the problem and the fix (exit status 2)."""

    exit_code = 2


class ConfigError(UnstableError, ValueError):
    """A configuration value out of its allowed range, or an unknown key."""


class ComponentFailed(UnstableError):
    """A plugin's component (a probe, a scripted player, a sampler) raised while it ran: the message names
    the component, its kind and the distribution that provides it (exit status 1)."""

    exit_code = 1


class RunStopped(UnstableError):
    """A run that started stopped before its end (an actor died): exit status 1, and how to resume."""

    exit_code = 1


class RunFailed(RunStopped):
    """A run that started and had to stop: its games keep failing, a component raised, the loss is not
    finite. The message names the cause and the fix (exit status 1)."""


def debug_enabled() -> bool:
    """`unstable --debug` (which sets it) or UNSTABLE_DEBUG=1: show tracebacks, not only the one line."""
    return os.environ.get("UNSTABLE_DEBUG", "").strip().lower() in ("1", "true", "yes")


def root_cause(exc: BaseException) -> BaseException:
    """The error itself, out of the Ray errors that carry it from actor to actor (`cause`, nested)."""
    for _ in range(10):
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException) or cause is exc:
            break
        exc = cause
    return exc


def describe(exc: BaseException) -> str:
    """One line for an exception, also for one raised inside a Ray actor: `Type: first line of message`
    (an UnstableError's own message as it is; a file's error as `path: what went wrong (Type)`)."""
    exc = root_cause(exc)
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror} ({type(exc).__name__})"
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, UnstableError):
        return first
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
