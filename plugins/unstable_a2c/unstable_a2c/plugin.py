"""Registers the `a2c` learner (a lazy import string: listing plugins never imports torch)."""

from unstable_core import hookimpl


@hookimpl
def register_learners(register):
    """Provide `a2c`."""
    register(
        "a2c", "unstable_a2c.learner:A2CLearner", "actor-critic with GAE; critic LoRA on the same backbone"
    )
