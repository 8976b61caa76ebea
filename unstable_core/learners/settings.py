"""A learner's settings: `LearnerConfig`, the RunConfig fields it reads (declared, defaulted and checked
there, once), and its algorithm options, checked by the class the learner declares."""

from __future__ import annotations

from typing import Any

import attrs

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError

#: the RunConfig fields a learner reads (batch_size: the steps the runtime pulls per update; temperature and
#: top_p: the sampler's, so that the learner's log pi is that of the policy that sampled, 0 (greedy) read as 1;
#: top_p 1: the whole vocabulary; learning_steps: the length of a linear lr_schedule)
LEARNER_SETTINGS = (
    "model_name",
    "lora_config",
    "batch_size",
    "mini_batch_size",
    "learning_rate",
    "lr_schedule",
    "learning_steps",
    "gradient_clipping",
    "gradient_checkpointing",
    "learner_autocast",
    "max_train_len",
    "max_generation_len",
    "temperature",
    "top_p",
    "importance_cap",
    "seed",
)
_RUN_FIELDS = attrs.fields_dict(RunConfig)


@attrs.frozen(
    these={
        name: attrs.field(type=_RUN_FIELDS[name].type, validator=_RUN_FIELDS[name].validator)
        for name in LEARNER_SETTINGS
    }
)
class LearnerConfig:
    """The learner's settings: the `LEARNER_SETTINGS` fields of RunConfig, with their types and checks (no
    defaults: `from_run` takes them from a validated RunConfig), so that each is declared, defaulted and
    checked in one place; stored in every checkpoint's learner_state.json."""

    @classmethod
    def from_run(cls, run_config: Any, learner: type | None = None) -> LearnerConfig:
        """The learner's part of a `RunConfig` (every field of this class, by name); an unset
        importance_cap becomes the `learner` class's `default_importance_cap`, and 0 None (no weights)."""
        fields = {f.name: getattr(run_config, f.name) for f in attrs.fields(cls)}
        if fields["importance_cap"] is None and learner is not None:
            fields["importance_cap"] = getattr(learner, "default_importance_cap", None)
        if fields["importance_cap"] == 0:
            fields["importance_cap"] = None
        return cls(**fields)


def algorithm_config(learner: str, config_cls: type | None, kwargs: dict[str, Any]) -> Any:
    """The attrs `config_cls` built from `kwargs` (None: no options allowed); an unknown key or a bad value
    raises ConfigError naming it."""
    allowed = [f.name for f in attrs.fields(config_cls)] if config_cls is not None else []
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ConfigError(
            f"unknown {learner} option(s) {', '.join(unknown)}; allowed: {', '.join(allowed) if allowed else 'none'}"
        )
    if config_cls is None:
        return None
    try:
        return config_cls(**kwargs)
    except ConfigError as exc:  # a shared validator's line, which names the option: say whose it is
        message = str(exc)
        raise ConfigError(message if message.startswith(f"{learner} ") else f"{learner} {message}") from None
    except (TypeError, ValueError) as exc:  # a value of the wrong type met a validator's comparison
        raise ConfigError(f"{learner} options {kwargs}: {exc}") from None


def lr_factor(schedule: str, done: int, learning_steps: int) -> float:
    """The learning rate's factor for the update after `done` updates: 1 (constant), or linear from 1 at
    the first update to 1 / learning_steps at the last (and there past it)."""
    if schedule == "constant":
        return 1.0
    return max(1.0 - done / learning_steps, 1.0 / learning_steps)
