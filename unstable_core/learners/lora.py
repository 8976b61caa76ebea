"""The learner's LoRA adapter: which of the model's linear layers it wraps, and the peft `LoraConfig` of a
resolved lora_config (its keys and defaults are `unstable_core.config.lora`'s)."""

from __future__ import annotations

from typing import Any

from unstable_core.errors import ConfigError


def present_target_modules(model: Any, wanted: list[str]) -> list[str]:
    """The names of `wanted` that are linear layers of `model` (so one config fits Llama, Qwen, GPT-2...)."""
    import torch

    linear_names = {
        name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)
    }
    found = [name for name in wanted if name in linear_names]
    if not found:
        raise ConfigError(
            f"none of lora_config.target_modules {wanted} is a linear layer of the model; "
            f"choose from: {', '.join(sorted(linear_names))}"
        )
    return found


def make_lora_config(cfg: dict[str, Any], target_modules: list[str]) -> Any:
    """A peft `LoraConfig` for a causal LM from a resolved lora_config."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg["lora_rank"],
        lora_alpha=cfg["lora_alpha"],
        lora_dropout=cfg["lora_dropout"],
        target_modules=target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
