"""unstable-ppo: the PPO-clip learner plugin of unstable."""

__version__ = "0.1.0"
