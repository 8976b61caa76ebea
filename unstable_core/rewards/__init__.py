"""The reward pipeline: the three stages' base classes (`base`), which plugins such as `unstable-rewards`
subclass, the pipeline that runs them (`pipeline`) and the pipeline a run prints (`specs`)."""

from unstable_core.rewards.base import (
    STAGES,
    FinalRewardTransform,
    SamplingRewardTransform,
    StepRewardTransform,
    check_stage,
    stage_of,
)

__all__ = [
    "STAGES",
    "FinalRewardTransform",
    "SamplingRewardTransform",
    "StepRewardTransform",
    "check_stage",
    "stage_of",
]
