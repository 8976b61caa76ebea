"""Registers the `neurd` learner (a lazy import string: listing plugins never imports torch)."""

from unstable_core import hookimpl


@hookimpl
def register_learners(register):
    """Provide `neurd`."""
    register(
        "neurd",
        "unstable_neurd.learner:NeuRDLearner",
        "thresholded NeuRD on the logits of every legal answer (values from branching or the played answer)",
    )
