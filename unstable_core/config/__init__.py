"""The run configuration, on the ground floor of the core: `RunConfig` (every setting, declared once), its
layers (`load`), the settings' syntax (env values, reward transforms, LoRA), UnstableBaselines v0.2's names
(`unstable_baselines`) and the generated reference (`reference`). It imports no other part of the core but
the data model, the errors and the model names; what needs more is checked in `runtime.launch.preflight`."""

from unstable_core.config.api import API_FIELDS
from unstable_core.config.envs import env_parts
from unstable_core.config.load import config_from_dict, load_config, merge_layers, tomllib, transform_defaults
from unstable_core.config.lora import DEFAULT_LORA_CFG, resolve_lora_config
from unstable_core.config.run_config import DEFAULT_ENV, RunConfig
from unstable_core.config.transforms import parse_transform

__all__ = [
    "API_FIELDS",
    "DEFAULT_ENV",
    "DEFAULT_LORA_CFG",
    "RunConfig",
    "config_from_dict",
    "env_parts",
    "load_config",
    "merge_layers",
    "parse_transform",
    "resolve_lora_config",
    "tomllib",
    "transform_defaults",
]
