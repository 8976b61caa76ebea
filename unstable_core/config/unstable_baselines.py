"""UnstableBaselines v0.2 compatibility, in one place: its `build()` and `run.start()` arguments as it
spelled them, its `vllm_config`, and the settings that run directories and TOML files written before
unstable dropped those spellings still hold (a `config.toml` of 7a23685 has `activation_checkpointing` and
`use_trainer_cache`).

`unstable_core.config` reads this module; nothing else knows the old names:

- `translate` turns one layer of a configuration (a TOML file, `build()`'s keyword arguments, the command
  line) into RunConfig's names and values before the layers merge;
- `apply_vllm_config` moves the reference's vllm_config keys onto the run fields they set once they have;
- `api_model_problem` says how to play the reference's OpenRouter opponents here.

Everything translated is in four tables: `RENAMED`, `IGNORED`, `VALUES` and `VLLM_CONFIG_FIELDS`; the
reference's own run, in our names, is `REFERENCE_RUN`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from unstable_core.config.lora import DEFAULT_LORA_CFG
from unstable_core.errors import ConfigError, UnstableError
from unstable_core.model_loading import API_PREFIX

#: the reference's argument names -> RunConfig's fields
RENAMED: dict[str, str] = {
    "algorithm": "learner",  # build(algorithm=...)
    "env_sampling_strategy": "env_sampler",
    "opponent_sampling_strategy": "sampler",
    "num_collection_workers": "num_train_workers",  # run.start(num_collection_workers=...)
    # build() had two switches with one meaning here (each decoder layer's activations recomputed in the
    # backward pass, HF gradient checkpointing): either one turns it on
    "activation_checkpointing": "gradient_checkpointing",
}
#: fields that an old and a new name may both set in one layer: either one true turns it on
EITHER_TURNS_ON = frozenset({"gradient_checkpointing"})
#: the reference's arguments that are accepted and ignored, and why
IGNORED: dict[str, str] = {
    "use_trainer_cache": "the reference's learner cache switch; unstable has no such cache"
}
#: the reference's values that are spelled otherwise here, by RunConfig field
VALUES: dict[str, dict[str, str]] = {
    "sampler": {"none": "mirror"},  # opponent_sampling_strategy "none", its default, is self-play
}
#: the reference's vllm_config keys -> the run field each sets
VLLM_CONFIG_FIELDS: dict[str, str] = {
    "model_name": "model_name",
    "temperature": "temperature",
    "max_tokens": "max_generation_len",
    "max_parallel_seq": "max_batch_size",
    "max_loras": "max_loras",
    "lora_config": "lora_config",
    "max_model_len": "max_model_len",
}
VLLM_KEYS_TEXT = f"UnstableBaselines v0.2's keys ({', '.join(VLLM_CONFIG_FIELDS)})"

#: fixed opponents the reference played through OpenRouter (its default: google/gemini-2.0-flash-lite-001)
API_ONLY_MODELS = ("google/gemini-", "anthropic/claude", "openai/gpt-4", "openai/gpt-3.5", "x-ai/grok")
OPENROUTER_URL = "https://openrouter.ai/api/v1"

#: the reference's run in RunConfig's names: build()'s defaults, its minimal script (Qwen3-1.7B-Base on
#: SimpleTak by mirror self-play) and run.start()'s sizes, each with where it comes from; the values of
#: examples/reference.toml (`unstable_core.config.reference`), for a GPU
REFERENCE_RUN: dict[str, tuple[Any, str]] = {
    "model_name": ("Qwen/Qwen3-1.7B-Base", "the minimal script's model"),
    "learner": ("reinforce", 'build(algorithm="reinforce")'),
    "train_envs": (
        [{"env_id": "SimpleTak-v0-train", "num_players": 2, "num_actors": 2}],
        "the minimal script's env, mirror self-play",
    ),
    "eval_envs": (
        [
            {"env_id": "SimpleTak-v0-train", "num_players": 2, "fixed_opponent": "base"},
            {"env_id": "KuhnPoker-v0-train", "num_players": 2, "fixed_opponent": "base"},
        ],
        "the reference played its evaluation games against google/gemini-2.0-flash-lite-001 through "
        "OpenRouter; unstable plays API models too (openai:MODEL, unstable_core/inference/openai_api.py): "
        f'fixed_opponent = "{API_PREFIX}google/gemini-2.0-flash-lite-001" with base_url = "{OPENROUTER_URL}" '
        'and api_key_env = "OPENROUTER_API_KEY" play that one; "base", the untrained base model, needs no key',
    ),
    "env_sampler": ("random", "build()'s default (UniformRandomEnvSampler)"),
    "sampler": ("mirror", 'build()\'s default opponent_sampling_strategy "none": self-play'),
    "prompt_template": ("qwen3-zs", "the minimal script's template"),
    "learning_steps": (200, "run.start(learning_steps=200)"),
    "batch_size": (384, "build()'s default"),
    "mini_batch_size": (1, "build()'s default"),
    "learning_rate": (1e-5, "build()'s default"),
    "gradient_clipping": (0.2, "build()'s default"),
    "gradient_checkpointing": (True, "build(activation_checkpointing=True, gradient_checkpointing=True)"),
    "max_train_len": (None, "build()'s None; an over-long step is dropped here, never cut"),
    "max_generation_len": (4096, "_default_vllm_cfg()'s max_tokens"),
    "buffer_size": (None, "2 x batch_size under admission drop, as the reference's"),
    "max_staleness": (1, "ours: the reference had no bound on off-policy data"),
    "admission": ("drop", "the reference's: collection workers start games freely, stale data is dropped"),
    "lora_config": (dict(DEFAULT_LORA_CFG), "_DEFAULT_LORA_CFG"),
    "final_transforms": (["role-advantage-by-env"], "build(): RoleAdvantageByEnvFormatter(), tau 0.001"),
    "step_transforms": (
        ["reward-for-format:reward=1.5,penalty=0.0", "penalty-for-invalid-move:reward=1.0,penalty=-1.0"],
        "build(): RewardForFormat(1.5), PenaltyForInvalidMove(1.0, -1.0)",
    ),
    "sampling_transforms": (["normalize-by-env:z_score=true"], "build(): NormalizeRewardsByEnv(True)"),
    "num_train_workers": (256, "run.start(num_collection_workers=256)"),
    "num_eval_workers": (16, "run.start(num_eval_workers=16)"),
    "backend": ("vllm", "the reference's only engine"),
    "temperature": (0.6, "_default_vllm_cfg()'s temperature"),
    "max_model_len": (8192, "_default_vllm_cfg()'s max_model_len"),
    "max_batch_size": (128, "_default_vllm_cfg()'s max_parallel_seq"),
    "max_loras": (8, "_default_vllm_cfg()'s max_loras"),
    "error_allowance": (0, "env.state.error_allowance = 0: an invalid move loses"),
    "wandb_project": ("UnstableBaselines", "build()'s default (with --tracker wandb)"),
}


def translate(layer: Mapping[str, Any]) -> dict[str, Any]:
    """One layer of a configuration in RunConfig's names and values: None (the reference's "not given")
    left out, so the field's default applies; old names renamed, ignored ones dropped, old values mapped.
    Unknown keys pass through, for config to name. Two names of one setting must agree."""
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in layer.items():
        if value is None or key in IGNORED:
            continue
        name = RENAMED.get(key, key)
        if isinstance(value, str):
            value = VALUES.get(name, {}).get(value, value)
        if key != name and name in EITHER_TURNS_ON and not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        if name in out and out[name] != value:
            if name not in EITHER_TURNS_ON or not isinstance(out[name], bool) or not isinstance(value, bool):
                raise ConfigError(
                    f"{given_as[name]} = {out[name]!r} and {key} = {value!r} both set {name}; give one"
                )
            value = True
        out[name], given_as[name] = value, key
    return out


def fields_set_by(layer: Mapping[str, Any]) -> set[str]:
    """The run fields a translated layer sets, directly or through the reference's vllm_config keys."""
    names = set(layer)
    vllm = layer.get("vllm_config")
    if isinstance(vllm, Mapping):
        names |= {VLLM_CONFIG_FIELDS[k] for k in vllm if k in VLLM_CONFIG_FIELDS}
    return names


def without_keys_for(vllm: Mapping[str, Any], names: set[str]) -> dict[str, Any]:
    """An earlier layer's vllm_config less the reference's keys for fields that a later layer sets:
    `--temperature` beats a file's vllm_config.temperature."""
    return {k: v for k, v in vllm.items() if VLLM_CONFIG_FIELDS.get(k) not in names}


def misplaced_vllm_key(key: str) -> str | None:
    """Why the reference's vllm_config key `key` cannot be given to RunConfig itself (None: not one)."""
    if key not in VLLM_CONFIG_FIELDS:
        return None
    return (
        f"vllm_config.{key}: {VLLM_KEYS_TEXT} are read by load_config() and build(); with RunConfig itself "
        f"set {VLLM_CONFIG_FIELDS[key]} instead"
    )


def api_model_problem(name: str) -> str | None:
    """How to play one of the reference's OpenRouter opponents here (None: `name` is not one)."""
    if not str(name).startswith(API_ONLY_MODELS):
        return None
    return (
        f"fixed_opponents: {name!r} is an API model (UnstableBaselines v0.2 played it through OpenRouter): "
        f"use --fixed-opponent {API_PREFIX}{name} --base-url {OPENROUTER_URL} --api-key-env OPENROUTER_API_KEY"
    )


@attrs.frozen
class VLLMConfig:
    """The reference's `vllm_config` mapped onto our names: the vllm backend's options (its `lora_rank`
    the adapters' rank, which the backend rounds up to a rank vLLM accepts) and the default sampling."""

    backend_kwargs: dict[str, Any]
    temperature: float
    max_tokens: int


def map_vllm_config(cfg: Mapping[str, Any]) -> VLLMConfig:
    """Translate the reference's vllm_config (model_name, max_parallel_seq, lora_config, ...), with its
    defaults (`_default_vllm_cfg`) for the keys left out."""
    unknown = sorted(set(cfg) - set(VLLM_CONFIG_FIELDS))
    if unknown:
        raise UnstableError(f"unknown vllm_config keys {unknown}; allowed: {', '.join(VLLM_CONFIG_FIELDS)}")
    if not cfg.get("model_name"):
        raise UnstableError("vllm_config needs model_name (a hub id or local model folder)")
    lora = dict(cfg.get("lora_config") or {})
    unknown = sorted(set(lora) - set(DEFAULT_LORA_CFG))
    if unknown:
        raise UnstableError(
            f"unknown vllm_config.lora_config keys {unknown}; allowed: {', '.join(DEFAULT_LORA_CFG)}"
        )
    max_model_len = int(cfg.get("max_model_len", 4096))
    kwargs = {
        "model": cfg["model_name"],
        "max_batch_size": int(cfg.get("max_parallel_seq", 128)),
        "max_loras": int(cfg.get("max_loras", 8)),
        "max_model_len": max_model_len,
        "lora_rank": int(lora.get("lora_rank", 32)),
    }
    temperature = float(cfg.get("temperature", 0.6))
    if not temperature >= 0.0:
        raise UnstableError(
            f"vllm_config.temperature must be >= 0, got {temperature}; use 0 for greedy decoding"
        )
    max_tokens = cfg.get("max_tokens")  # None: as many as the context allows (clamped per request)
    return VLLMConfig(kwargs, temperature, int(max_tokens) if max_tokens is not None else max_model_len)


def apply_vllm_config(clean: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The reference's vllm_config keys of a merged, translated config, moved onto the run fields they set
    (`defaults`: RunConfig's, for model_name and max_model_len when neither is given); a field given beside
    its vllm_config key must agree with it. The rest of vllm_config (the vllm backend's options) stays."""
    vllm = clean.get("vllm_config")
    if not isinstance(vllm, Mapping):
        return clean
    vllm = dict(vllm)
    given = {k: vllm.pop(k) for k in VLLM_CONFIG_FIELDS if k in vllm}
    clean = {**clean, "vllm_config": vllm}
    if not given:
        return clean
    context = {k: clean.get(VLLM_CONFIG_FIELDS[k], defaults[k]) for k in ("model_name", "max_model_len")}
    try:
        mapped = map_vllm_config({**context, **given})
    except UnstableError as exc:
        raise ConfigError(str(exc)) from exc
    except (TypeError, ValueError) as exc:  # e.g. a temperature that is not a number
        raise ConfigError(f"vllm_config: {exc}; give {VLLM_KEYS_TEXT} numbers") from exc
    values = {
        "model_name": mapped.backend_kwargs["model"],
        "temperature": mapped.temperature,
        "max_tokens": mapped.max_tokens,  # None there: as long as the context allows
        "max_parallel_seq": mapped.backend_kwargs["max_batch_size"],
        "max_loras": mapped.backend_kwargs["max_loras"],
        "max_model_len": mapped.backend_kwargs["max_model_len"],
    }
    lora = given.pop("lora_config", None)
    if lora is not None:  # the reference handed vLLM the learner's LoRA settings: they must be the run's
        values["lora_config"] = {**DEFAULT_LORA_CFG, **lora}
        if clean.get("lora_config") is not None:
            clean["lora_config"] = {**DEFAULT_LORA_CFG, **clean["lora_config"]}
        given["lora_config"] = lora
    for key in given:
        field, value = VLLM_CONFIG_FIELDS[key], values[key]
        if clean.get(field) is not None and clean[field] != value:
            raise ConfigError(
                f"vllm_config.{key} = {given[key]!r} disagrees with {field} = {clean[field]!r}; give only one"
            )
        clean[field] = value
    return clean
