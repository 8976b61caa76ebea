"""The `unstable` command line: run, play, plugins, envs; plugins may add commands."""

from __future__ import annotations

import json
import sys

import click

from unstable_core import __version__
from unstable_core.cli.options import debug_option
from unstable_core.errors import UnstableError, debug_enabled


class _Group(click.Group):
    """A click group that turns `UnstableError` into one line on stderr: exit status 2 for bad input,
    1 for a run that had to stop (`RunFailed`); the traceback too under --debug."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UnstableError as exc:
            if debug_enabled():
                import traceback

                traceback.print_exception(exc)
            click.secho(f"Error: {exc}", fg="red", err=True)
            sys.exit(getattr(exc, "exit_code", 2))


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="unstable")
@debug_option
def cli() -> None:
    """Online, asynchronous, multi-agent RL of language models on text games."""


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--all", "show_all", is_flag=True, help="Include the core's built-in components.")
def plugins(as_json: bool, show_all: bool) -> None:
    """List the installed plugins and what each provides."""
    import os

    from unstable_core.plugins import LOAD_ENV, list_plugins

    infos = list_plugins(include_builtins=show_all)
    if as_json:
        click.echo(json.dumps([p.to_json() for p in infos], indent=2))
        return
    if not infos:
        hidden = f" ({LOAD_ENV}={os.environ[LOAD_ENV]!r} hides the others)" if LOAD_ENV in os.environ else ""
        click.echo(
            f"No plugin is installed{hidden}. Install one, e.g. `pip install unstable-reinforce "
            "unstable-samplers unstable-rewards` (or `pip install -e plugins/<name>` from a checkout); "
            "`unstable plugins --all` shows the core's built-ins."
        )
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title="unstable plugins")
    for col in ("package", "version", "kind", "name", "description"):
        table.add_column(col, overflow="fold")
    for p in infos:
        rows = [(c["kind"], c["name"], Text(c["description"])) for c in p.components()]
        if p.error:
            rows.append(("error", "", Text(p.error, style="red")))
        for i, (kind, name, description) in enumerate(rows or [("-", "", Text(""))]):
            first = i == 0
            table.add_row(
                Text(p.name if first else ""), Text(p.version if first else ""), kind, name, description
            )
        table.add_section()
    Console().print(table)


def _add_core_commands() -> None:
    from unstable_core.cli.envs import envs
    from unstable_core.cli.eval import eval_command
    from unstable_core.cli.export import export_command
    from unstable_core.cli.leaderboard import leaderboard_command
    from unstable_core.cli.report import report_command
    from unstable_core.cli.run import play, run
    from unstable_core.cli.runs import runs_command

    commands = (
        run,
        play,
        envs,
        eval_command,
        leaderboard_command,
        export_command,
        runs_command,
        report_command,
    )
    for command in commands:
        cli.add_command(command)


_add_core_commands()


def main() -> None:
    from unstable_core.plugins import add_commands

    try:
        add_commands(cli)  # each plugin on its own; a failing one is listed by `unstable plugins`
    except UnstableError as exc:
        click.secho(f"Error: {exc}", fg="red", err=True)
        sys.exit(getattr(exc, "exit_code", 2))
    cli(prog_name="unstable")
