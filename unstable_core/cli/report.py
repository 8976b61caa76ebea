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
def report_command(run: Path, out: Path | None) -> None:
    """Write RUN/report.html: one file that opens offline with the verdict and its tests, rates per
    checkpoint, ratings, probes, evaluations, the reward pipeline and config, charts and a game browser.
    RUN is a run directory (runs/<name>, also one still going) or an `unstable eval --out` folder."""
    from unstable_core.report.html.page import write_report

    path = write_report(run, out)
    click.echo(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser")
