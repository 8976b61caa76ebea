"""The probes of a run's scheduled evaluation (`--eval-probe`, `<run>/probes.jsonl`, a record per step and
probe): each figure of the base model against the last checkpoint measured, for summary.json and the
summary's verdict lines, and each figure per step for `curves.png`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unstable_core.io import read_jsonl
from unstable_core.report.labels import short_env_names

PROBES_FILE = "probes.jsonl"
HEADING = "probes, the base model vs the last checkpoint measured (95% t intervals over positions, or exact):"


def probe_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of `<run>/probes.jsonl` by step (none without the file)."""
    return sorted(read_jsonl(Path(run_dir) / PROBES_FILE), key=lambda r: r["step"])


def _series(records: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[int, dict[str, Any]]]:
    """(probe, env, figure) -> step -> the figure ({value, low, high, n, exact})."""
    out: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    for r in records:
        for name, figure in r["figures"].items():
            out.setdefault((r["probe"], r["env_id"], name), {})[r["step"]] = figure
    return out


def figure_text(figure: dict[str, Any]) -> str:
    """`0.365 (exact, n=12)` or `0.092 [0.061, 0.123] (n=64)`."""
    if figure.get("exact"):
        return f"{figure['value']:.3f} (exact, n={figure['n']})"
    return f"{figure['value']:.3f} [{figure['low']:.3f}, {figure['high']:.3f}] (n={figure['n']})"


def probe_changes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (probe, env, figure): the base model's figure (step 0), the last checkpoint's (`last_step`) and
    how they compare: `change` (last - base) and `verdict`, an exact change for exact figures, else whether
    the two 95% intervals overlap; None where either was not measured."""
    out = []
    for (probe, env_id, name), by_step in _series(records).items():
        base = by_step.get(0)
        last_step = max((s for s in by_step if s > 0), default=None)
        last = by_step.get(last_step) if last_step is not None else None
        change, verdict = None, "no checkpoint measured" if base else "base model not measured"
        if base and last:
            change = last["value"] - base["value"]
            if base.get("exact") and last.get("exact"):
                verdict = f"exact change {change:+.3f}"
            elif last["low"] > base["high"] or last["high"] < base["low"]:
                verdict = f"{'higher' if change > 0 else 'lower'}: the 95% intervals do not overlap"
            else:
                verdict = "no clear change: the 95% intervals overlap"
        out.append(
            {
                "probe": probe,
                "env_id": env_id,
                "figure": name,
                "base": base,
                "last": last,
                "last_step": last_step,
                "change": change,
                "verdict": verdict,
            }
        )
    return out


def change_line(change: dict[str, Any]) -> str:
    """`kuhn-exploitability exploitability (KuhnPoker-v0-short), base vs ckpt 4: 0.458 (exact, n=12) ->
    0.412 (exact, n=12): exact change -0.046`."""
    base, last = (figure_text(f) if f else "-" for f in (change["base"], change["last"]))
    step = change["last_step"]
    head = f"{change['probe']} {change['figure']} ({change['env_id']}), base vs ckpt {step if step else '-'}"
    return f"{head}: {base} -> {last}: {change['verdict']}"


def change_lines(changes: list[dict[str, Any]]) -> list[str]:
    """A heading, then a line per probe figure (none without probes)."""
    return [HEADING, *(f"  {change_line(c)}" for c in changes)] if changes else []


def probe_panels(
    records: list[dict[str, Any]],
) -> list[tuple[str, list[int], list[float], list[float], list[float]]]:
    """(label, steps, values, lower, upper) per (probe, env, figure), for curves.png; an exact figure's
    band is its value."""
    series = _series(records)
    envs = short_env_names(env for _, env, _ in series)
    panels = []
    for (probe, env_id, name), by_step in series.items():
        steps = sorted(by_step)
        label = f"{name}\n{probe}\n({envs.get(env_id, env_id)}, probe)"
        values = [by_step[s]["value"] for s in steps]
        panels.append(
            (label, steps, values, [by_step[s]["low"] for s in steps], [by_step[s]["high"] for s in steps])
        )
    return panels
