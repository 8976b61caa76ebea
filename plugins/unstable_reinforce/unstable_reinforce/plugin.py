"""Registers the `reinforce` learner (a lazy import string: listing plugins never imports torch)."""

from unstable_core import hookimpl


@hookimpl
def register_learners(register):
    """Provide `reinforce`."""
    register(
        "reinforce",
        "unstable_reinforce.learner:REINFORCELearner",
        "policy gradient on the sampled tokens, Dr. GRPO constant normaliser",
    )
