"""Registers the `cispo` learner (a lazy import string: listing plugins never imports torch)."""

from unstable_core import hookimpl


@hookimpl
def register_learners(register):
    """Provide `cispo`."""
    register(
        "cispo",
        "unstable_cispo.learner:CISPOLearner",
        "token-level REINFORCE, importance weight pi/mu clipped to [1 - eps_low, 1 + eps_high] and detached "
        "(MiniMax-M1's CISPO), a mean over the update's tokens",
    )
