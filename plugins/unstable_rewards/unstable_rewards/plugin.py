"""The plugin entry point: registers the reward transforms by name, as lazy import strings."""

from __future__ import annotations

from unstable_core import hookimpl
from unstable_core.hookspecs import Register

TRANSFORMS: dict[str, tuple[str, str]] = {
    "role-advantage": (
        "unstable_rewards.final:RoleAdvantageFormatter",
        "final: subtract a per-seat EMA of past rewards (ema_alpha=0.999, UnstableBaselines v0.2's tau=0.001)",
    ),
    "role-advantage-by-env": (
        "unstable_rewards.final:RoleAdvantageByEnvFormatter",
        "final: subtract a per-(env, seat) EMA of past rewards (ema_alpha=0.999, UnstableBaselines v0.2's tau=0.001)",
    ),
    "spiral-rae": (
        "unstable_rewards.final:SpiralRAE",
        "final: SPIRAL's role-conditioned advantage, r - b per (env, seat), b read before update (ema_alpha=0.95)",
    ),
    "reward-for-format": (
        "unstable_rewards.step:RewardForFormat",
        "step: add `reward` to well-formatted answers, else `penalty` (reward=0.0, penalty=0.0; run default reward=1.5 as UnstableBaselines v0.2's build())",
    ),
    "penalty-for-invalid-move": (
        "unstable_rewards.step:PenaltyForInvalidMove",
        "step: add `penalty` to invalid moves, else `reward` (reward=0.0, penalty=-1.0; run default reward=1.0, penalty=-1.0 as UnstableBaselines v0.2's build())",
    ),
    "entropy-bonus": (
        "unstable_rewards.step:EntropyBonus",
        "step: add tau x -log mu of a valid move, entropy-regularised policy gradient (tau=0.1)",
    ),
    "normalize": (
        "unstable_rewards.sampling:NormalizeRewards",
        "sampling: mean-centre the batch's rewards, z-score if z_score=true (z_score=false)",
    ),
    "normalize-by-env": (
        "unstable_rewards.sampling:NormalizeRewardsByEnv",
        "sampling: mean-centre (or z-score) rewards per env id (z_score=false; run default z_score=true as UnstableBaselines v0.2's build())",
    ),
    "group-relative": (
        "unstable_rewards.sampling:GroupRelative",
        "sampling: GRPO's group-relative advantage: each trajectory's outcome against its group's (the env sampler's repeat=G), plus its steps' own shaping; or per identical prompt (by=seed, z_score=false)",
    ),
}


@hookimpl
def register_reward_transforms(register: Register) -> None:
    """Register every transform of this distribution under its name."""
    for name, (target, description) in TRANSFORMS.items():
        register(name, target, description)
