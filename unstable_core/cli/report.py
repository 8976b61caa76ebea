"""`unstable report RUN`: the run's (or an `unstable eval --out` folder's) self-contained report.html."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(name="report")
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write it. Default: RUN/report.html.",
)
@click.option(
    "--score-legal",
    "score_games",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Score the legal answers of the last N games with the checkpoint that played each turn (a forward "
    "pass per turn; the cost is printed).",
)
@click.option("--model", default=None, help="Base model for --score-legal. Default: the run's model_name.")
@click.option(
    "--device", default=None, help="Device for --score-legal (cpu, cuda). Default: CUDA if present."
)
def report_command(
    run: Path, out: Path | None, score_games: int, model: str | None, device: str | None
) -> None:
    """Write RUN/report.html: one file that opens offline with the verdict and its tests, rates per
    checkpoint, ratings, probes, evaluations, the reward pipeline and config, charts and a game browser.
    RUN is a run directory (runs/<name>, also one still going) or an `unstable eval --out` folder."""
    from unstable_core.report.html.page import LegalScoring, write_report

    scoring = LegalScoring(score_games, model, device) if score_games else None
    path = write_report(run, out, scoring=scoring)
    if scoring is not None:
        click.echo(scoring.cost)
    click.echo(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser")
