"""The LoRA settings (`lora_config`): UnstableBaselines v0.2's keys and defaults, checked as the learner
reads them (the peft side is `unstable_core.learners.lora`)."""

from __future__ import annotations

from typing import Any

from unstable_core.errors import ConfigError

DEFAULT_LORA_CFG: dict[str, Any] = {
    "lora_rank": 32,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def resolve_lora_config(lora_config: dict[str, Any] | None, name: str = "lora_config") -> dict[str, Any]:
    """The defaults updated with `lora_config`; an unknown key or a bad value raises ConfigError (`name` is how
    the error calls the setting)."""
    cfg = dict(DEFAULT_LORA_CFG)
    unknown = sorted(set(lora_config or {}) - set(cfg))
    if unknown:
        raise ConfigError(f"unknown {name} key(s) {', '.join(unknown)}; allowed: {', '.join(cfg)}")
    cfg.update(lora_config or {})
    rank, alpha, dropout, targets = (cfg[k] for k in DEFAULT_LORA_CFG)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError(f"{name}.lora_rank must be an integer >= 1, got {rank!r}")
    if not _number(alpha) or not alpha > 0:
        raise ConfigError(f"{name}.lora_alpha must be a number > 0, got {alpha!r}")
    if not _number(dropout) or not 0.0 <= dropout < 1.0:
        raise ConfigError(f"{name}.lora_dropout must be a number in [0, 1), got {dropout!r}")
    if (
        isinstance(targets, str)
        or not isinstance(targets, (list, tuple))
        or not targets
        or not all(isinstance(t, str) and t for t in targets)
    ):
        raise ConfigError(f"{name}.target_modules must be a non-empty list of module names, got {targets!r}")
    cfg["target_modules"] = list(targets)
    return cfg
