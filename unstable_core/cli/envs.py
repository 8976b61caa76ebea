"""`unstable envs`: the games and tasks a run can name."""

from __future__ import annotations

import json

import attrs
import click

from unstable_core.errors import ConfigError


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
