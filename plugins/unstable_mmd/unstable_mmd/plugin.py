"""Registers the `mmd` learner (a lazy import string: listing plugins never imports torch)."""

from unstable_core import hookimpl


@hookimpl
def register_learners(register):
    """Provide `mmd`."""
    register(
        "mmd",
        "unstable_mmd.learner:MMDLearner",
        "magnetic mirror descent: a target over the legal answers fitted by cross-entropy, magnet uniform or base",
    )
