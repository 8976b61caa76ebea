"""What the HTML report shows, as plain data: charts (series with their 95% bands and references on axes
that do not exaggerate) and tables, read from a run directory's (or an evaluation folder's) own files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from unstable_core.io import read_jsonl
from unstable_core.report.checkpoint_rates import VersionRates
from unstable_core.report.stats import Rate

LOSS_KEYS = (
    "learner/loss",
    "learner/policy_loss",
    "learner/value_loss",
    "learner/grad_norm",
    "learner/off_policy/kl",
)


def chart(
    title: str, xlabel: str, ylabel: str, series: list[dict[str, Any]], refs: dict[str, float] | None = None,
    y_range: tuple[float, float] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A chart: `series` ({label, x, y, lo, hi}), reference lines `refs` (label -> y) and the y range."""
    return {"title": title, "xlabel": xlabel, "ylabel": ylabel, "series": series,
            "refs": [{"label": k, "y": v} for k, v in (refs or {}).items()], "y": y_range}  # fmt: skip


def honest_range(
    series: list[dict[str, Any]], refs: dict[str, float], rate: bool = False
) -> tuple[float, float]:
    """A y axis from 0 (or below, for negative data) to past every value, band and reference: a change shows
    at its true size beside the references (a rate: 0 to 1)."""
    if rate:
        return (0.0, 1.0)
    values = [v for s in series for k in ("y", "lo", "hi") for v in s.get(k) or [] if _num(v)]
    values += [v for v in refs.values() if _num(v)]
    lo, hi = min([0.0, *values]), max([0.0, *values])
    return (lo * 1.05, hi * 1.05 if hi > 0 else 1.0)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def rate_text(r: Rate | dict[str, Any]) -> str:
    """`0.52 [0.41, 0.63] (13/25)`, `-` for no data."""
    d = r.to_dict() if isinstance(r, Rate) else r
    if not d.get("n"):
        return "-"
    k = d["k"] if float(d["k"]).is_integer() else round(d["k"], 1)
    return f"{d['rate']:.3f} [{d['lo']:.3f}, {d['hi']:.3f}] ({k:g}/{d['n']})"


def _band(label: str, pts: list[tuple[int, Rate]]) -> dict[str, Any]:
    return {"label": label, "x": [v for v, _ in pts], "y": [r.rate for _, r in pts],
            "lo": [r.interval[0] for _, r in pts], "hi": [r.interval[1] for _, r in pts]}  # fmt: skip


def rate_charts(rates: dict[int, VersionRates]) -> list[dict[str, Any]]:
    """Invalid-move and format rates of the training turns, and the win rate against each fixed opponent,
    per checkpoint with their 95% Wilson bands, each on 0-1."""
    out = []
    for label, get in (("invalid moves per turn", lambda r: r.invalid_rate), ("formatted answers per turn", lambda r: r.format_rate)):  # fmt: skip
        pts = [(v, get(r)) for v, r in rates.items() if get(r).n]
        if pts:
            out.append(
                chart(label, "checkpoint (learner step)", "rate", [_band(label, pts)], None, (0.0, 1.0))
            )
    for opp in sorted({o for r in rates.values() for o in r.games}):
        pts = [(v, r.win_rate(opp)) for v, r in rates.items() if r.games.get(opp)]
        refs = {"even (0.5)": 0.5}
        out.append(chart(f"win rate vs {opp}", "checkpoint (learner step)", "W / n", [_band(f"vs {opp}", pts)], refs, (0.0, 1.0)))  # fmt: skip
    return out


def rate_table(rates: dict[int, VersionRates]) -> dict[str, Any]:
    """A row per checkpoint: its rates with their 95% intervals and counts."""
    opps = sorted({o for r in rates.values() for o in r.games})
    cols = [
        "checkpoint",
        "invalid moves per turn",
        "formatted per turn",
        *(f"win rate vs {o} (W-D-L)" for o in opps),
    ]
    rows = []
    for v, r in rates.items():
        wins = [
            f"{rate_text(r.win_rate(o))} {'-'.join(map(str, r.wdl(o)))}" if r.games.get(o) else "-"
            for o in opps
        ]
        rows.append([str(v), rate_text(r.invalid_rate), rate_text(r.format_rate), *wins])
    return {"title": "Rates per checkpoint (95% Wilson intervals)", "columns": cols, "rows": rows}


def versions_text(versions: list[int]) -> str:
    """`0-5, 7, 9-12`: checkpoints as runs of consecutive steps."""
    runs: list[list[int]] = []
    for v in sorted(versions):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


def verdict_table(verdict: dict[str, Any]) -> dict[str, Any]:
    """The learning verdict's tests: each rate, first vs last quarter of the checkpoints, p and verdict."""
    rows = []
    for r in verdict.get("rates", []):
        first, second = r.get("first"), r.get("second")
        p = r.get("p_value")
        rows.append([r.get("label", r.get("rate", "")), versions_text(r.get("versions", [])),
                     rate_text(first) if first else "-", rate_text(second) if second else "-",
                     "-" if p is None else f"{p:.2g}", r.get("method") or "-",
                     r.get("verdict", "") + (f": {r['why_untested']}" if r.get("why_untested") else "")])  # fmt: skip
    cols = ["rate", "checkpoints with data", "first quarter", "last quarter", "p", "test", "verdict"]
    return {"title": f"Tests (first vs last quarter, significance {verdict.get('significance', 0.01)})", "columns": cols, "rows": rows}  # fmt: skip


def league_models(run_dir: Path) -> list[dict[str, Any]]:
    """The league file's models (none without one)."""
    from unstable_core.league.league import league_path

    path = league_path(run_dir)
    try:
        return json.loads(path.read_text()).get("models", []) if path.is_file() else []
    except (OSError, ValueError):
        return []


def rating_parts(models: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ratings' chart (checkpoints' mu with a mu ± 2 sigma band, fixed models as references) and table."""
    ckpts = sorted((m for m in models if m.get("kind") == "checkpoint"), key=lambda m: m.get("iteration", 0))
    fixed = {
        f"{m['uid']} (fixed)": m["mu"] for m in models if m.get("kind") == "fixed" and m.get("active", True)
    }
    charts = []
    if ckpts:
        s = {"label": "checkpoints' mu", "band": "mu ± 2 sigma", "x": [m["iteration"] for m in ckpts], "y": [m["mu"] for m in ckpts],
             "lo": [m["mu"] - 2 * m["sigma"] for m in ckpts], "hi": [m["mu"] + 2 * m["sigma"] for m in ckpts]}  # fmt: skip
        charts.append(
            chart(
                "TrueSkill ratings", "checkpoint (learner step)", "mu", [s], fixed, honest_range([s], fixed)
            )
        )
    cols = ["model", "kind", "step", "mu", "sigma", "mu - 3 sigma", "games", "W-D-L", "active"]
    rows = [[str(m.get("uid")), str(m.get("kind")), str(m.get("iteration", "")), f"{m['mu']:.2f}", f"{m['sigma']:.2f}",
             f"{m['mu'] - 3 * m['sigma']:.2f}", str(m.get("games", 0)),
             f"{m.get('wins', 0)}-{m.get('draws', 0)}-{m.get('losses', 0)}", str(m.get("active", True))] for m in models]  # fmt: skip
    table = {
        "title": "TrueSkill ratings (mu ± sigma; mu - 3 sigma is the conservative rating)",
        "columns": cols,
        "rows": rows,
    }
    return charts, ([table] if models else [])


def probe_parts(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A chart per probe figure (its value per step with the 95% band, and its references: uniform, Nash,
    scripted players), from 0 past the references; and a table of every record."""
    series: dict[tuple[str, str, str], list[tuple[int, dict[str, Any]]]] = {}
    refs: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in sorted(records, key=lambda r: r["step"]):
        for name, fig in r.get("figures", {}).items():
            series.setdefault((r["probe"], r["env_id"], name), []).append((r["step"], fig))
            refs[(r["probe"], r["env_id"], name)] = dict(r.get("references", {}).get(name, {}))
    charts = []
    for key, pts in series.items():
        s = {"label": key[2], "x": [p for p, _ in pts], "y": [f["value"] for _, f in pts],
             "lo": [f.get("low", f["value"]) for _, f in pts], "hi": [f.get("high", f["value"]) for _, f in pts]}  # fmt: skip
        rate = key[2].endswith(("_mass", "_rate", "accuracy"))
        charts.append(chart(f"{key[2]}: {key[0]} ({key[1]})", "learner step (0: the base model)", key[2], [s], refs[key], honest_range([s], refs[key], rate)))  # fmt: skip
    from unstable_core.report.probes import COLUMNS, rows

    body = [[str(r["step"]), *row] for r in records for row in rows([{"model": r.get("model", ""), **r}])]
    tables = [{"title": "Probes per checkpoint", "columns": ["step", *COLUMNS], "rows": body}] if body else []
    return charts, tables


def loss_charts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The learner's losses, gradient norm and KL per step (not yardsticks: their own scale)."""
    out = []
    for key in LOSS_KEYS:
        pts = [(r["step"], r[key]) for r in records if _num(r.get(key)) and "step" in r]
        if pts:
            s = {"label": key, "x": [p for p, _ in pts], "y": [v for _, v in pts]}
            out.append(chart(key.split("/", 1)[1], "learner step", key.split("/", 1)[1], [s]))
    return out


def eval_charts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scheduled evaluations' win rates per checkpoint (metrics.jsonl), each on 0-1 with 0.5 marked."""
    from unstable_core.report.scheduled_eval import eval_panels

    out = []
    for label, xs, ys, los, his in eval_panels(records):
        s = {"label": label.replace("\n", " "), "x": xs, "y": ys, "lo": los, "hi": his}
        out.append(
            chart(label.replace("\n", " "), "checkpoint", "win rate", [s], {"even (0.5)": 0.5}, (0.0, 1.0))
        )
    return out


def _cell(v: Any) -> str:
    if isinstance(v, dict) and "n" in v and "k" in v:
        return rate_text(v)
    if isinstance(v, float):
        return f"{v:.3f}"
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def results_table(title: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """A table of `unstable eval`'s results (summary.json), a column per key."""
    cols = [k for k in results[0] if k != "errors"]
    return {"title": title, "columns": cols, "rows": [[_cell(r.get(c)) for c in cols] for r in results]}


def eval_tables(folders: list[Path]) -> list[dict[str, Any]]:
    """The tables of each `unstable eval` folder's summary.json (results and probes)."""
    from unstable_core.report.probes import COLUMNS, rows

    tables = []
    for folder in folders:
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if summary.get("results"):
            tables.append(
                results_table(f"Evaluation {folder.name} (95% Wilson intervals)", summary["results"])
            )
        if summary.get("probe_results"):
            body = rows(summary["probe_results"])
            tables.append(
                {"title": f"Evaluation {folder.name}: probes", "columns": list(COLUMNS), "rows": body}
            )
    return tables


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's records (none without it)."""
    return read_jsonl(run_dir / "metrics.jsonl")
