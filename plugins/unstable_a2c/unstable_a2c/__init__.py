"""unstable-a2c: the actor-critic (A2C with GAE) learner plugin of unstable."""

__version__ = "0.1.0"
