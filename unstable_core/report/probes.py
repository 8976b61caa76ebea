"""The probes' table of `unstable eval --probe`: one row per (model, probe, env, figure), the figure with its
95% interval (or `exact`) and count, and its reference values (a uniformly random legal player's, Nash)."""

from __future__ import annotations

from typing import Any

COLUMNS = ("model", "probe", "env", "figure", "value [95% CI]", "n", "references")


def _value(figure: dict[str, Any]) -> str:
    if figure.get("exact"):
        return f"{figure['value']:.3f} (exact)"
    return f"{figure['value']:.3f} [{figure['low']:.3f}, {figure['high']:.3f}]"


def rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """The table's rows from the probes' JSON results (each with its `model`)."""
    out = []
    for r in results:
        for name, figure in r["figures"].items():
            refs = r.get("references", {}).get(name, {})
            out.append(
                [
                    r["model"],
                    r["probe"],
                    r["env_id"],
                    name,
                    _value(figure),
                    str(figure["n"]),
                    ", ".join(f"{k} {v:.3f}" for k, v in refs.items()) or "-",
                ]
            )
    return out


def rich_table(results: list[dict[str, Any]], title: str) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col, overflow="fold")
    for row in rows(results):
        table.add_row(*(Text(c) for c in row))
    return table


def plain_table(results: list[dict[str, Any]], title: str) -> str:
    body = [list(COLUMNS), *rows(results)]
    widths = [max(len(r[i]) for r in body) for i in range(len(COLUMNS))]
    lines = [title] + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join(lines)
