"""unstable-rewards: final, step and sampling reward transforms for unstable, and chains of them."""

from unstable_rewards.compose import (
    ComposeFinalRewardTransforms,
    ComposeSamplingRewardTransforms,
    ComposeStepRewardTransforms,
)
from unstable_rewards.final import RoleAdvantageByEnvFormatter, RoleAdvantageFormatter, SpiralRAE
from unstable_rewards.sampling import GroupRelative, NormalizeRewards, NormalizeRewardsByEnv
from unstable_rewards.step import EntropyBonus, PenaltyForInvalidMove, RewardForFormat

__version__ = "0.1.0"

__all__ = [
    "ComposeFinalRewardTransforms",
    "ComposeSamplingRewardTransforms",
    "ComposeStepRewardTransforms",
    "EntropyBonus",
    "GroupRelative",
    "NormalizeRewards",
    "NormalizeRewardsByEnv",
    "PenaltyForInvalidMove",
    "RewardForFormat",
    "RoleAdvantageByEnvFormatter",
    "RoleAdvantageFormatter",
    "SpiralRAE",
]
