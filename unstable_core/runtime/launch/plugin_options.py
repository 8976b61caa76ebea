"""Building a plugin's component from the options a user gave, before anything starts: whatever the
plugin's code raises (its own ConfigError, a plain ValueError, an assertion) ends as one ConfigError line
that names the option, the component by its registered name, and the keys it takes."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from unstable_core.errors import ConfigError, UnstableError, describe


def option_names(target: Any, positional: int = 0, fixed: Iterable[str] = ()) -> list[str] | None:
    """The keyword options a class or factory takes, those the runtime passes itself (its first
    `positional` parameters and the `fixed` keywords) left out: the named parameters of its `__init__`
    and, while one takes `**kwargs`, of its bases' up to the core's base class, which refuses the
    unknown (`BaseModelSampler`). None when it cannot be told (a factory or a class taking `**kwargs`)."""
    names: list[str] = []
    runtime = set(fixed)
    chain = _initialisers(target)
    for _owner, fn in chain:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return None
        named = [
            n
            for n, p in params.items()
            if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        runtime.update(named[: positional if not names else 0])
        names += [n for n in named if n not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return [n for n in names if n not in runtime]
    if not chain:  # a class without an __init__ of its own takes nothing
        return []
    last = chain[-1][0]
    if isinstance(last, type) and str(getattr(last, "__module__", "")).startswith("unstable_core."):
        return [n for n in names if n not in runtime]
    return None


def _initialisers(target: Any) -> list[tuple[Any, Callable[..., Any]]]:
    """(class, its `__init__`) for each class of `target`'s MRO that defines one but `object`; a factory
    is its own."""
    if not isinstance(target, type):
        return [(None, target)]
    return [(cls, cls.__dict__["__init__"]) for cls in target.__mro__[:-1] if "__init__" in cls.__dict__]


def takes_text(name: str, allowed: list[str] | None) -> str:
    """`reward-for-format takes reward, penalty` (or `no options`)."""
    if allowed is None:
        return f"see `unstable plugins` for {name}'s options"
    return f"{name} takes {', '.join(allowed) if allowed else 'no options'}"


def construct(
    flag: str,
    name: str,
    target: Any,
    options: Mapping[str, Any],
    args: tuple[Any, ...] = (),
    fixed: Mapping[str, Any] | None = None,
) -> Any:
    """`target(*args, **fixed, **options)`, the component registered as `name` and given by `flag`; an
    unknown key, or anything the plugin's code raises, is one ConfigError naming them and the keys it
    takes."""
    fixed = dict(fixed or {})
    allowed = option_names(target, len(args), fixed)
    if allowed is not None:
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ConfigError(
                f"{flag} {name}: unknown option {', '.join(unknown)}; {takes_text(name, allowed)}"
            )
    try:
        return target(*args, **fixed, **options)
    except Exception as exc:  # a plugin's own code: whatever it raises is one line
        raise ConfigError(f"{flag} {name}: {reason(exc)}; {takes_text(name, allowed)}") from None


def reason(exc: BaseException) -> str:
    """A plugin's complaint in one line: an UnstableError's message as it is, else `Type: message`."""
    return describe(exc) if isinstance(exc, UnstableError) else _typed(exc)


def _typed(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_learner_options(
    name: str, learner: Any, algorithm_config: Mapping[str, Any], importance_cap: float | None
) -> None:
    """The learner's `check_options`, once for --algorithm-config alone and, when --importance-cap is given,
    once more with it: a refusal names the option that caused it."""
    check = getattr(learner, "check_options", None)
    if check is None:
        return
    _checked("--algorithm-config", name, lambda: check(dict(algorithm_config), importance_cap=None))
    if importance_cap is not None:
        _checked(
            "--importance-cap", name, lambda: check(dict(algorithm_config), importance_cap=importance_cap)
        )


def _checked(flag: str, name: str, check: Callable[[], Any]) -> None:
    try:
        check()
    except Exception as exc:
        why = reason(exc)
        named = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", why)
        raise ConfigError(f"{flag}: {why}" if named else f"{flag}: learner {name}: {why}") from None


def check_components(
    cfg: Any, components: Any, train_specs: list[Any], eval_specs: list[Any], league: Iterable[str] = ()
) -> None:
    """The components' own options as their classes take them, without Ray and without a model: the env
    and opponent samplers are built once, the opponent sampler's own opponents are among the fixed
    opponents that enter the `league`, the learner checks its algorithm options (`check_options`)."""
    construct(
        "--env-sampler-config",
        cfg.env_sampler,
        components.env_sampler,
        cfg.env_sampler_config,
        (train_specs, eval_specs),
        {"seed": cfg.seed},
    )
    sampler = construct(
        "--sampler-config",
        cfg.sampler,
        components.model_sampler,
        cfg.sampler_config,
        fixed={"seed": cfg.seed},
    )
    _checked_opponents(cfg.sampler, sampler, set(league))
    if components.learner is not None:
        check_learner_options(cfg.learner, components.learner, cfg.algorithm_config, cfg.importance_cap)


def _checked_opponents(name: str, sampler: Any, league: set[str]) -> None:
    """Each fixed opponent the sampler says it returns (`opponents()`) is one that enters the league."""
    try:
        wanted = list(getattr(sampler, "opponents", list)())
    except Exception as exc:
        raise ConfigError(f"--sampler {name}: opponents() failed: {reason(exc)}") from None
    for opponent in wanted:
        if opponent not in league:
            raise ConfigError(
                f"--sampler {name}: it samples the opponent {opponent!r}, which is not in the league; add "
                f"--fixed-opponent {opponent}"
            )
