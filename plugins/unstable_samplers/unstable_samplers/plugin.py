"""The hooks of unstable-samplers: registers its samplers lazily, so listing them imports nothing heavy."""

from __future__ import annotations

from unstable_core import hookimpl


@hookimpl
def register_env_samplers(register):
    """Env samplers: uniform, and a curriculum that favours games the learner wins about half the time."""
    register(
        "random", "unstable_samplers.env:UniformRandomEnvSampler", "uniform over the training environments"
    )
    register(
        "adaptive",
        "unstable_samplers.env:AdaptiveEnvSampler",
        "favours environments where the learner's recent win rate is closest to 50%",
    )


@hookimpl
def register_model_samplers(register):
    """Opponent samplers: self-play, fixed baselines, recent checkpoints, TrueSkill match quality, win rate."""
    register("mirror", "unstable_samplers.model:MirrorModelSampler", "the current checkpoint (self-play)")
    register("fixed", "unstable_samplers.model:FixedOpponentModelSampler", "uniform over the fixed opponents")
    register(
        "lagged", "unstable_samplers.model:AsynchronousModelSampler", "uniform over the last k checkpoints"
    )
    register(
        "trueskill",
        "unstable_samplers.model:TrueSkillModelSampler",
        "opponents in proportion to their TrueSkill match quality with the current checkpoint",
    )
    register(
        "win-rate",
        "unstable_samplers.model:WinRateModelSampler",
        "opponents the learner recently beat about `target` of the time (default 0.5)",
    )
