"""unstable-neurd: the NeuRD learner plugin of unstable."""

__version__ = "0.1.0"
