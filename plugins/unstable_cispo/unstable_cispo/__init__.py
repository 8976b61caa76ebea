"""unstable-cispo: the CISPO learner plugin of unstable."""

__version__ = "0.1.0"
