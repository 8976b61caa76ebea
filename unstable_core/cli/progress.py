"""A command's live progress (rich on a terminal, plain lines otherwise) and the summary it prints at the end."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

from unstable_core.errors import RunFailed, describe
from unstable_core.report.run_probes import change_lines
from unstable_core.report.scheduled_eval import evals_table, last_eval_lines
from unstable_core.rewards.specs import pipeline_text
from unstable_core.runtime.launch.cluster import raise_interrupt


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
    used = used_steps_text(learner)
    if used:
        table.add_row("steps used", used)
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


def ratings_table(league: dict[str, Any]) -> Any:
    """TrueSkill ratings of every model, best first; its games beside W/D/L counted in `games` too."""
    from rich.table import Table

    from unstable_core.report.labels import SELF_PLAY_CAPTION, results_text

    table = Table(title="TrueSkill ratings", caption=SELF_PLAY_CAPTION)
    for col in ("model", "kind", "mu", "sigma", "mu - 3 sigma", "games", "W/D/L"):
        table.add_column(col, overflow="fold")
    models = sorted((m for m in league.get("models", []) if m.get("active", True)), key=lambda m: -m["mu"])
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


def used_steps_text(learner: dict[str, Any]) -> str:
    """`256/268 (96%)`: the training steps the learner was served of those the games generated, as of its
    last update; empty before the first."""
    generated, used = learner.get("buffer/steps_generated"), learner.get("buffer/steps_served")
    if not generated or used is None:
        return ""
    return f"{used:.0f}/{generated:.0f} ({100 * used / generated:.0f}%)"


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
    used = used_steps_text(snap.get("learner", {}))
    if used:
        parts.append(f"steps used {used}")
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


def reward_stages(run: Any, learning_steps: int | None) -> dict[str, list[str]]:
    """The reward pipeline of a run that learns, by stage (`rewards.specs.pipeline`); empty for `play`."""
    from unstable_core.rewards.specs import pipeline

    cfg = getattr(run, "cfg", None)
    if learning_steps is None or not hasattr(cfg, "final_transforms"):
        return {}
    return pipeline(cfg, getattr(run, "components", None))


def legal_answers_line(run: Any, learning_steps: int | None) -> str:
    """Which of a training run's envs record every legal answer (and are branched), in one line."""
    from unstable_core.envs.specs import train_specs
    from unstable_core.games.legal_answers import scored_envs

    cfg = getattr(run, "cfg", None)
    if learning_steps is None or not hasattr(cfg, "train_envs"):
        return ""
    scored, plain = scored_envs(spec.env_id for spec in train_specs(cfg))
    parts = []
    if scored:
        branched = f", valued by {cfg.branch_samples} continuations a move" if cfg.branch_samples else ""
        if cfg.branch_samples and cfg.branch_max_moves:
            branched += f" at states of at most {cfg.branch_max_moves} legal moves"
        if cfg.branch_samples and cfg.branch_depth:
            branched += f", cut after {cfg.branch_depth} turns"
        if cfg.branch_samples and cfg.branch_discount < 1:
            branched += f", discounted by {cfg.branch_discount:g} a turn"
        parts.append(f"scored on {', '.join(scored)}{branched}")
    if plain:
        parts.append(f"not on {', '.join(plain)} (their legal moves cannot be read: sampled gradient)")
    return "legal answers: " + "; ".join(parts)


def precision_line(run: Any, learning_steps: int | None) -> str:
    """Where the learner's bfloat16 autocast is asked for but this CPU cannot run it, the one line saying so."""
    from unstable_core.learners.precision import autocast_line
    from unstable_core.model_loading import default_device

    cfg = getattr(run, "cfg", None)
    if learning_steps is None or not getattr(cfg, "learner_autocast", False):
        return ""
    return autocast_line(cfg.device or default_device())


def execute(run: Any, learning_steps: int | None, title: str, **start_kwargs: Any) -> dict[str, Any]:
    """Start a run, show live progress, stop cleanly on Ctrl-C, print the summary."""
    from rich.console import Console
    from rich.live import Live
    from rich.markup import escape

    console = Console()
    console.print(f"[bold]{title}[/bold]: run directory [cyan]{run.run_dir}[/cyan]")
    stages = reward_stages(run, learning_steps)
    if stages:
        console.print(f"reward pipeline: {escape(pipeline_text(stages))}", soft_wrap=True)
    for line in (legal_answers_line(run, learning_steps), precision_line(run, learning_steps)):
        if line:
            console.print(escape(line), soft_wrap=True)
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
    if stages:
        console.print(f"reward pipeline: {escape(pipeline_text(stages))}", soft_wrap=True)
    console.print(_progress_table(summary, learning_steps, f"{title}: summary"))
    if summary.get("league"):
        console.print(ratings_table(summary["league"]))
    if summary.get("evals"):
        console.print(evals_table(summary["evals"]))
    if rates:
        console.print(rates_table(rates))
    for line in [*(verdict.lines() if verdict is not None else []), *change_lines(summary.get("probes", []))]:
        console.print(escape(line), soft_wrap=True)
    shown = [("picture", p) for p in summary.get("plots", [])] + [("report", summary.get("report"))]
    for what, p in (x for x in shown if x[1]):
        console.print(f"{what}: [cyan]{p}[/cyan]")
    disk = summary.get("disk", {})
    used = (
        f" ({disk['bytes'] / 1e6:.0f} MB, checkpoints {disk['checkpoints_bytes'] / 1e6:.0f} MB)"
        if disk
        else ""
    )
    console.print(f"run directory: [cyan]{run.run_dir}[/cyan]{used}")
    if summary.get("interrupted"):
        sys.exit(130)  # the shell's convention for a command stopped by Ctrl-C
    return summary
