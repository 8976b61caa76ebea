"""`unstable run` and `unstable play`: options generated from `RunConfig`, live progress, summary."""

from __future__ import annotations

from typing import Any

import attrs
import click

from unstable_core.cli.options import config_options, overrides_from, run_options
from unstable_core.cli.progress import execute
from unstable_core.config import API_FIELDS, RunConfig, env_parts, load_config
from unstable_core.envs.specs import train_specs
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
    from unstable_core.runtime.run import Run

    if resume_dir is not None:
        if config_path is not None:
            raise ConfigError("--resume reads the run's own config.toml: drop --config")
        run = Run.resume(resume_dir, overrides_from(options))
        for line in run.resume_point.lines() if run.resume_point is not None else ():
            click.echo(line)
        title = f"unstable run --resume ({run.cfg.learner}, {run.cfg.sampler})"
        execute(run, run.cfg.learning_steps, title)
        return
    cfg = load_config(config_path, overrides_from(options))
    execute(Run.open(cfg), cfg.learning_steps, f"unstable run ({cfg.learner}, {cfg.sampler})")


#: `unstable play`'s options that are RunConfig's own: their help and defaults are written there
PLAY_FIELDS = (
    "train_envs",
    "model_name",
    "prompt_template",
    "max_generation_len",
    "temperature",
    "run_name",
    "runs_dir",
    "seed",
    "max_turns",
    "error_allowance",
    "backend",
    "device",
    "max_model_len",
    *API_FIELDS,
    "progress_every_s",
)
_RUN = attrs.fields_dict(RunConfig)


@click.command()
@click.option("--games", default=8, show_default=True, type=click.IntRange(1), help="Games to play.")
@click.option(
    "--opponent",
    default=None,
    help="Opponent: 'base', a LoRA folder, another model or openai:MODEL. Default: self-play.",
)
@click.option(
    "--players",
    default=None,
    type=click.IntRange(1),
    help="Seats of each --env that gives none (ENV_ID:PLAYERS). Default: the env's own.",
)
@click.option(
    "--concurrency",
    "num_train_workers",
    default=None,
    type=click.IntRange(1),
    help=f"Games in flight. [default: {_RUN['num_train_workers'].default}]",
)
@config_options(*PLAY_FIELDS)
def play(games: int, opponent: str | None, players: int | None, **options: Any) -> None:
    """Play games without learning and report outcomes, format and invalid-move rates and ratings."""
    from unstable_core.runtime.run import Run

    overrides = overrides_from(options)
    envs = overrides.get("train_envs") or _RUN["train_envs"].default.factory()
    if players is not None:
        envs = [e if len(env_parts(str(e))) > 1 else f"{e}:{players}" for e in envs]
    workers = overrides.get("num_train_workers", _RUN["num_train_workers"].default)
    overrides = {
        **overrides,
        "train_envs": envs,  # mirror self-play seats the model at every seat, a fixed opponent at one
        "sampler": "fixed" if opponent else "mirror",
        "fixed_opponents": [opponent] if opponent else [],
        "num_train_workers": min(workers, games),
        "num_eval_workers": 0,
        "final_transforms": [],
        "step_transforms": [],
        "sampling_transforms": [],
    }
    cfg = load_config(None, overrides)
    title = f"unstable play ({', '.join(spec.env_id for spec in train_specs(cfg))})"
    summary = execute(Run.open(cfg, learn=False), None, title, max_games=games)
    counts = summary.get("counts", {})
    if counts.get("train_games") and counts.get("train_failed") == counts["train_games"]:
        errors = summary.get("failures", {}).get("errors", [])
        top = max(errors, key=lambda e: e["count"])["error"] if errors else "no error recorded"
        raise RunFailed(f"every one of the {counts['train_games']} games failed: {top}")
