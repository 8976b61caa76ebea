"""The error type of unstable: a message for a person, shown as one line with a non-zero exit status."""


class UnstableError(Exception):
    """A bad input or a broken setup, with a message that names the problem and the fix."""


class ConfigError(UnstableError, ValueError):
    """A configuration value out of its allowed range, or an unknown key."""


class RunStopped(UnstableError):
    """A run that started stopped before its end (an actor died): exit status 1, and how to resume."""

    exit_code = 1
