"""`unstable runs [DIR]`: the runs of a folder with their state, steps, wall time, verdict and disk use."""

from __future__ import annotations

from pathlib import Path

import click

from unstable_core.errors import UnstableError
from unstable_core.io import dumps_json
from unstable_core.report.runs import list_runs


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


@click.command(name="runs")
@click.argument("folder", default="runs", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def runs_command(folder: Path, as_json: bool) -> None:
    """Each run in FOLDER [default: runs]: name, state (running, finished, stopped and why), learner steps,
    wall time, verdict and disk use."""
    if not folder.is_dir():
        raise UnstableError(f"{folder} is not a directory: give the folder that holds runs (e.g. runs)")
    rows = list_runs(folder)
    if as_json:
        click.echo(dumps_json([r.to_dict() for r in rows], indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"runs in {folder}")
    for col in ("name", "state", "steps", "wall", "verdict", "disk"):
        table.add_column(col, overflow="fold")
    for r in rows:
        wall = "-" if r.wall_s is None else f"{r.wall_s / 60:.1f} min"
        table.add_row(r.name, r.state, str(r.steps), wall, r.verdict or "-", _size(r.disk_bytes))
    console = Console()
    if not console.is_terminal:
        console.width = 160
    console.print(table)
