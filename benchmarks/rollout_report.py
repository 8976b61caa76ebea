"""The rollout benchmark's report: its rows and their table."""

from __future__ import annotations

import attrs


@attrs.define
class Row:
    """One line of the report: a measured value against its target."""

    name: str
    value: float
    unit: str
    target: str
    passed: bool | None  # None: no target (a baseline)
    note: str = ""


def print_table(rows: list[Row], title: str) -> None:
    """The report as a rich table: measured value, target, PASS/MISS."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("measure", "value", "target", "verdict", "note"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for r in rows:
        verdict = "" if r.passed is None else "[green]PASS[/green]" if r.passed else "[red]MISS[/red]"
        value = f"{r.value:.1e}" if 0 < abs(r.value) < 0.01 else f"{r.value:,.2f}"
        table.add_row(r.name, f"{value} {r.unit}".strip(), r.target, verdict, r.note)
    Console(width=160).print(table)


def per_round(xs: list[float]) -> str:
    """A note's list of the values of each round."""
    return "per round: " + ", ".join(f"{x:,.2f}" for x in xs)
