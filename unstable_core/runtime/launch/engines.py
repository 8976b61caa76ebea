"""Which backend serves a model of a run: the run's backend for local models, `openai` for `openai:MODEL`.

`engine_spec(model, cfg, local_kwargs)` is the one place that turns a model name and a run config into a
backend name and its options; `unstable run` (and `unstable eval`) start their inference actors from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError
from unstable_core.model_loading import is_api_model


@attrs.frozen
class EngineSpec:
    """A backend (a registered name) and its constructor options; `remote` engines need no GPU nor threads."""

    backend: str
    kwargs: dict[str, Any]
    remote: bool = False


def engine_spec(model: str, cfg: RunConfig, local_kwargs: Mapping[str, Any]) -> EngineSpec:
    """The backend and options that serve `model` (an alias, hub id, folder, or openai:MODEL) in `cfg`'s
    run; a local model gets the run's backend with `local_kwargs` (e.g. `Run.backend_kwargs(placement)`)."""
    if is_api_model(model):
        return EngineSpec("openai", api_backend_kwargs(model, cfg), remote=True)
    return EngineSpec(cfg.backend, {**local_kwargs, "model": model})


def api_backend_kwargs(model: str, cfg: RunConfig) -> dict[str, Any]:
    """The `openai` backend's options for `model` from the run's api_* settings (no key: only its variable)."""
    return {
        "model": model,
        "base_url": cfg.base_url,
        "api_key_env": cfg.api_key_env,
        "concurrency": cfg.api_concurrency,
        "timeout_s": cfg.api_timeout_s,
        "max_retries": cfg.api_max_retries,
        "max_tokens": cfg.api_max_tokens,
    }


def check_api_models(cfg: RunConfig) -> None:
    """Before Ray starts: every openai:MODEL of the run is reachable, takes the key and is served
    (ConfigError with one line naming the fix otherwise)."""
    from unstable_core.inference.openai_api import ApiError, check_api_model

    for model in cfg.api_models():
        try:
            check_api_model(
                model,
                cfg.base_url,
                api_key_env=cfg.api_key_env,
                timeout_s=cfg.api_timeout_s,
                max_retries=min(cfg.api_max_retries, 2),
            )
        except ApiError as exc:
            raise ConfigError(f"{model}: {exc}") from None
