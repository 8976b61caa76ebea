"""The checks of a RunConfig that tie settings together, run as one is made (each setting's own range is
its validator's): one ConfigError line naming the settings and the fix. What needs another part of the
core (the env catalogue, a backend, a model) is checked before a run starts, in
`unstable_core.runtime.launch.preflight`."""

from __future__ import annotations

import re
from typing import Any

from unstable_core.config import unstable_baselines as ub
from unstable_core.config.api import default_base_url
from unstable_core.config.envs import check_env_settings
from unstable_core.config.lora import resolve_lora_config
from unstable_core.config.transforms import parse_transform
from unstable_core.errors import ConfigError
from unstable_core.model_loading import is_api_model

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_run_config(cfg: Any) -> None:
    """Every check below, in order; `lora_config` is completed with its defaults and `base_url` with the
    environment's when an API model needs one."""
    _check_sizes(cfg)
    _check_opponents(cfg)
    _check_api_settings(cfg)
    _check_vllm_config(cfg)
    cfg.lora_config = resolve_lora_config(cfg.lora_config, "lora_config")  # as the learner checks it
    max_rank = cfg.vllm_config.get("max_lora_rank")
    if max_rank is not None and max_rank < cfg.lora_config["lora_rank"]:
        raise ConfigError(
            f"vllm_config.max_lora_rank ({max_rank}) is below lora_config.lora_rank "
            f"({cfg.lora_config['lora_rank']}): vLLM could not load the adapters; drop it or raise it"
        )
    check_env_settings(cfg.train_envs, cfg.eval_envs)
    for stage in ("final", "step", "sampling"):
        for t in getattr(cfg, f"{stage}_transforms"):
            parse_transform(t)
    _check_groups(cfg)


def _check_sizes(cfg: Any) -> None:
    if cfg.mini_batch_size > cfg.batch_size:
        raise ConfigError(f"mini_batch_size ({cfg.mini_batch_size}) must be <= batch_size ({cfg.batch_size})")
    if cfg.buffer_size is not None and cfg.buffer_size < cfg.batch_size:
        raise ConfigError(
            f"buffer_size ({cfg.buffer_size}) must be >= batch_size ({cfg.batch_size}): the buffer could "
            "never hold a batch; raise --buffer-size or leave it out"
        )
    if not cfg.train_envs:
        raise ConfigError("train_envs is empty: give at least one --env")
    if cfg.eval_every and not cfg.num_eval_workers:
        raise ConfigError(
            "eval_every needs evaluation games in flight: give --num-eval-workers >= 1 (e.g. 4)"
        )
    if cfg.eval_probes and not cfg.eval_every:
        raise ConfigError("--eval-probe runs with the scheduled evaluation: give --eval-every K as well")


def _check_opponents(cfg: Any) -> None:
    if cfg.sampler == "fixed" and not cfg.fixed_opponents:
        raise ConfigError("sampler 'fixed' needs at least one --fixed-opponent (e.g. --fixed-opponent base)")
    for name in cfg.fixed_opponents:
        problem = ub.api_model_problem(name)
        if problem:
            raise ConfigError(problem)


def _check_api_settings(cfg: Any) -> None:
    """The trained model is local; API opponents get a base URL (from $OPENAI_BASE_URL when not given,
    checked by the OpenAI client before the run starts)."""
    if is_api_model(cfg.model_name):
        raise ConfigError(
            f"model_name {cfg.model_name!r} is an API model: it cannot be trained (no weights, no token "
            "log-probs); train a local model and play it as --fixed-opponent"
        )
    if not ENV_NAME.fullmatch(str(cfg.api_key_env)):
        # never repeat the value: it may be the key itself, given by mistake
        raise ConfigError(
            "api_key_env takes the NAME of an environment variable (such as OPENAI_API_KEY), not a key; "
            "export the key in that variable"
        )
    if cfg.base_url is None and cfg.api_models():
        cfg.base_url = default_base_url()


def _check_vllm_config(cfg: Any) -> None:
    """vllm_config is a table whose keys are not the run's own settings (the backend's options are checked
    against the vllm backend before the run starts)."""
    if not isinstance(cfg.vllm_config, dict):
        raise ConfigError(f"vllm_config must be a table (a JSON object), got {cfg.vllm_config!r}")
    for key in cfg.vllm_config:
        problem = ub.misplaced_vllm_key(key)
        if problem:
            raise ConfigError(problem)


def _check_groups(cfg: Any) -> None:
    """`group-relative` (by seed) compares the G games of a group: the env sampler must play them."""
    for t in cfg.sampling_transforms:
        name, kwargs = parse_transform(t)
        options = cfg.env_sampler_config
        repeat = options.get("repeat", 1) if isinstance(options, dict) else 1
        if name == "group-relative" and kwargs.get("by", "seed") == "seed" and repeat == 1:
            raise ConfigError(
                "sampling transform group-relative compares the G games of a group, but every game is "
                "played once: add --env-sampler-config '{\"repeat\": 8}' (G = 8), or use "
                "group-relative:by=prompt"
            )
