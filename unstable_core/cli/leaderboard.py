"""`unstable leaderboard RUN_DIR`: a run's leaderboard as a table (or JSON) and a picture; the leaderboard
itself is `unstable_core.report.leaderboard`."""

from __future__ import annotations

from pathlib import Path

import click

from unstable_core.errors import UnstableError
from unstable_core.io import dumps_json
from unstable_core.report.leaderboard import leaderboard, leaderboard_table, plot_leaderboard


@click.command(name="leaderboard")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder (or .png file) for the picture [default: RUN_DIR/leaderboard.png].",
)
def leaderboard_command(run_dir: Path, as_json: bool, out: Path | None) -> None:
    """Every checkpoint and fixed opponent of a run: TrueSkill mu, sigma, mu - 3 sigma, games, W/D/L and win
    rate against each fixed opponent with its 95% interval; writes leaderboard.png."""
    if not run_dir.is_dir():
        raise UnstableError(f"{run_dir} is not a directory: give the directory of a run (runs/<name>)")
    entries = leaderboard(run_dir)
    if out is None:
        png = run_dir / "leaderboard.png"
    else:
        png = out if out.suffix == ".png" else out / "leaderboard.png"
    title = f"leaderboard of {run_dir.resolve().name}"
    plot_leaderboard(entries, png, title)
    if as_json:
        click.echo(
            dumps_json(
                {"run_dir": str(run_dir), "picture": str(png), "models": [e.to_dict() for e in entries]},
                indent=1,
            )
        )
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = 160  # a file or a pipe: room for every column rather than 80 cut ones
    console.print(leaderboard_table(entries, title))
    console.print(f"picture: [cyan]{png}[/cyan]")
