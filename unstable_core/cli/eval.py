"""`unstable eval MODEL... --opponent OPP --env ENV --games N`: models against fixed opponents, seats
alternated, many games in flight, a table with 95% intervals, every game and a summary on disk; with
`--probe NAME`, a game's exact yardsticks of each model's policy too."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import attrs
import click

from unstable_core.cli.options import config_options
from unstable_core.config import API_FIELDS, DEFAULT_ENV, RunConfig
from unstable_core.errors import RunFailed, UnstableError
from unstable_core.eval.plan import EVAL_SETTINGS

_RUN = attrs.fields(RunConfig)


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
    help="Opponent (repeatable): a scripted player (random, optimal, heuristic), base, a run dir, a checkpoint, "
    "a model, openai:MODEL. Default: base.",
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
    "--probe",
    "probes",
    multiple=True,
    help="Probe each MODEL (repeatable): NAME on each --env it covers (else its own default env), or "
    "NAME:ENV. Probes: `unstable plugins --all`. With probes only, no game is played.",
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
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1), help="Games in flight.")
@click.option(
    "--template",
    default=None,
    help=f"Prompt template. Default: the evaluated run's, else {_RUN.prompt_template.default!r}.",
)
@config_options(*EVAL_SETTINGS, *API_FIELDS)
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
def eval_command(models, opponents, envs, tasks, probes, games, all_checkpoints, concurrency, template,
                 out, as_json, allow_failures, **options) -> None:  # fmt: skip
    """Evaluate MODEL(s) (run dirs, checkpoints, models, base, openai:MODEL) against fixed opponents on games
    (--env), on single-turn tasks (--task: accuracy) and with probes (--probe: exact yardsticks of the
    policy). A checkpoint plays with its run's --max-generation-len unless given; the same --seed plays the
    same games (local models)."""
    from unstable_core.eval.plan import plan_evaluation
    from unstable_core.eval.play import discard_unplayed, open_out_dir

    evaluation = plan_evaluation(
        models, opponents, envs, tasks, games, all_checkpoints, template, options, probes
    )
    out_dir, made = open_out_dir(out, evaluation.models)
    err = click.echo if not as_json else lambda m: click.echo(m, err=True)
    started = time.time()
    results = _play(evaluation.run_plan, out_dir, made, concurrency, err) if evaluation.planned else []
    probed = []
    if evaluation.probes:
        from unstable_core.eval.probes import probe_evaluation

        asked = ", ".join(map(str, evaluation.probes))
        err(f"unstable eval: probing {len(evaluation.models)} model(s) with {asked}; loading the models...")
        try:
            probed = probe_evaluation(evaluation)
        except BaseException as exc:  # no folder left behind unless it holds played games
            discard_unplayed(out_dir, made)
            if isinstance(exc, UnstableError) or not isinstance(exc, Exception):  # one line already
                raise
            raise RunFailed(failure_line(exc)) from exc
    wall_s = time.time() - started
    verdict = report(evaluation, results, out_dir, wall_s, as_json, err, probed, allow_failures)
    if verdict is not None:
        raise RunFailed(verdict)


def _play(plan: Any, out_dir: Path, made: list[Path], concurrency: int, err: Any) -> list[Any]:
    """Play the plan's games with a progress display; a stop before the end says what was kept."""
    from unstable_core.eval.play import discard_unplayed, play_games

    games = len(plan.schedule.games)
    err(f"unstable eval: {games} games into {out_dir}; starting Ray and loading the models...")
    progress = _Progress(games)
    try:
        return play_games(plan, out_dir, concurrency, on_progress=progress, on_event=progress.event)
    except BaseException as exc:
        gone = discard_unplayed(out_dir, made)
        where = "no game was recorded" if gone else f"the games recorded are in {out_dir}"
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C or a SIGTERM: Ray is already shut down
            progress.close()
            click.echo(f"interrupted: {where}", err=True)
            sys.exit(130)
        if isinstance(exc, UnstableError) or not isinstance(exc, Exception):  # one line already
            raise
        raise RunFailed(f"{failure_line(exc)}; {where}") from exc
    finally:
        progress.close()


def report(
    evaluation: Any,
    results: list[Any],
    out_dir: Path,
    wall_s: float,
    as_json: bool,
    err: Any,
    probed: list[dict[str, Any]] = (),
    allow_failures: bool = False,
) -> str | None:
    """The table of rates with their intervals and the probes' table (or the JSON summary), and
    summary.json; returns why the evaluation fails (`failure_verdict`), or None."""
    from rich.console import Console

    from unstable_core.io import atomic_write_json, dumps_json
    from unstable_core.report import probes as probe_tables
    from unstable_core.report.evaluation import aggregate, failure_verdict, plain_table, rich_table

    stats = aggregate(evaluation.planned, results)
    verdict = failure_verdict(stats, len(evaluation.planned), out_dir, allow_failures)
    what = [f"{evaluation.games} games per pair, seats alternated"] if evaluation.envs else []
    what += ["items in order per task"] if evaluation.tasks else []
    title = f"unstable eval: {', '.join(what)}, 95% Wilson intervals ({wall_s:.0f} s)"
    probe_title = "unstable eval: probes, 95% t intervals over positions (exact: computed on every position)"
    console = Console()
    shown = [
        (stats, rich_table, plain_table, title),
        (list(probed), probe_tables.rich_table, probe_tables.plain_table, probe_title),
    ]
    tables = [
        (rich if console.is_terminal else plain)(rows, heading)
        for rows, rich, plain, heading in shown
        if rows and not as_json
    ]
    summary = {"out_dir": str(out_dir), **evaluation.summary(), "wall_s": wall_s}
    summary["results"] = [s.to_dict() for s in stats]
    summary["probe_results"] = list(probed)
    atomic_write_json(out_dir / "summary.json", summary)
    summary["report"] = _write_report(out_dir, err)
    if as_json:
        click.echo(dumps_json(summary, indent=2))  # a rate of no games (NaN) is null, as in summary.json
        return verdict
    for table in tables:
        if console.is_terminal:
            console.print(table)
        else:
            click.echo(table)
    if stats:
        err(f"games: {out_dir / 'games' / 'games.jsonl'}")
    err(f"summary: {out_dir / 'summary.json'}")
    if summary["report"]:
        err(f"report: {summary['report']}")
    return verdict


def _write_report(out_dir: Path, err: Any) -> str | None:
    """The evaluation's report.html (its path), or a line saying why not: the results are kept either way."""
    from unstable_core.errors import describe
    from unstable_core.report.html.page import write_report

    try:
        return str(write_report(out_dir))
    except Exception as exc:  # the tables and summary.json matter more than the page
        err(f"report.html not written: {describe(exc)}")
        return None
