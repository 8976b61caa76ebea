"""LoRA settings of the learners: the reference's keys and defaults, turned into a peft `LoraConfig`."""

from __future__ import annotations

from typing import Any

from unstable_core.errors import ConfigError

DEFAULT_LORA_CFG: dict[str, Any] = {
    "lora_rank": 32,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def resolve_lora_cfg(lora_cfg: dict[str, Any] | None) -> dict[str, Any]:
    """The defaults updated with `lora_cfg`; an unknown key or a bad value raises ConfigError."""
    cfg = dict(DEFAULT_LORA_CFG)
    unknown = sorted(set(lora_cfg or {}) - set(cfg))
    if unknown:
        raise ConfigError(f"unknown lora_cfg key(s) {', '.join(unknown)}; allowed: {', '.join(cfg)}")
    cfg.update(lora_cfg or {})
    if not isinstance(cfg["lora_rank"], int) or cfg["lora_rank"] < 1:
        raise ConfigError(f"lora_cfg.lora_rank must be an integer >= 1, got {cfg['lora_rank']!r}")
    if not cfg["lora_alpha"] > 0:
        raise ConfigError(f"lora_cfg.lora_alpha must be > 0, got {cfg['lora_alpha']!r}")
    if not 0.0 <= cfg["lora_dropout"] < 1.0:
        raise ConfigError(f"lora_cfg.lora_dropout must be in [0, 1), got {cfg['lora_dropout']!r}")
    if isinstance(cfg["target_modules"], str) or not cfg["target_modules"]:
        raise ConfigError(
            f"lora_cfg.target_modules must be a non-empty list of module names, got {cfg['target_modules']!r}"
        )
    cfg["target_modules"] = list(cfg["target_modules"])
    return cfg


def present_target_modules(model: Any, wanted: list[str]) -> list[str]:
    """The names of `wanted` that are linear layers of `model` (so one config fits Llama, Qwen, GPT-2...)."""
    import torch

    linear_names = {
        name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)
    }
    found = [name for name in wanted if name in linear_names]
    if not found:
        raise ConfigError(
            f"none of lora_cfg.target_modules {wanted} is a linear layer of the model; "
            f"choose from: {', '.join(sorted(linear_names))}"
        )
    return found


def make_lora_config(cfg: dict[str, Any], target_modules: list[str]) -> Any:
    """A peft `LoraConfig` for a causal LM from a resolved lora_cfg."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg["lora_rank"],
        lora_alpha=cfg["lora_alpha"],
        lora_dropout=cfg["lora_dropout"],
        target_modules=target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
