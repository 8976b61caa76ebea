"""Registers the `ppo` learner (a lazy import string: listing plugins never imports torch)."""

from unstable_core import hookimpl


@hookimpl
def register_learners(register):
    """Provide `ppo`."""
    register(
        "ppo",
        "unstable_ppo.learner:PPOLearner",
        "decoupled PPO-clip per token (pi/pi_old, truncated pi_old/mu weight, dual clip), epochs and mini-batches, "
        "optional KL to the base and entropy bonus",
    )
