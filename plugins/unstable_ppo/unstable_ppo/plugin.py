"""Registers the `ppo` learner (a lazy import string: listing plugins never imports torch)."""

from unstable_core import hookimpl


@hookimpl
def register_learners(register):
    """Provide `ppo`."""
    register(
        "ppo",
        "unstable_ppo.learner:PPOLearner",
        "PPO-clip per token on pi/mu, epochs and mini-batches per batch, optional KL to the base and entropy bonus",
    )
