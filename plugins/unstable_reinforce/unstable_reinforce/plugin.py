"""Registers the `reinforce` learner (a lazy import string: listing plugins never imports torch)."""

from unstable_core import hookimpl


@hookimpl
def register_learners(register):
    """Provide `reinforce` and `reinforce-legal`."""
    register(
        "reinforce",
        "unstable_reinforce.learner:REINFORCELearner",
        "policy gradient on the sampled tokens, Dr. GRPO constant normaliser",
    )
    register(
        "reinforce-legal",
        "unstable_reinforce.legal:LegalPGLearner",
        "softmax policy gradient over the legal answers (exact with branched values): the saturating yardstick",
    )
