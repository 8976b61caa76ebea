"""`report.html`: one self-contained page of a run (or of an `unstable eval` folder) that opens offline: the
verdict and its tests, rates per checkpoint, ratings, probes, evaluations, the reward pipeline and config,
charts (Chart.js, inlined) and a game browser. Everything read from the run is data, never markup: it sits
in a JSON block with `<`, `>` and `&` escaped and the page sets it with textContent."""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.io import atomic_write_text, finite_json
from unstable_core.report.html import sections as sec

REPORT_FILE = "report.html"
# the page loads nothing from anywhere: inline scripts and styles only, images from data: URLs
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


def report_kind(folder: Path) -> str:
    """`run` (config.toml) or `eval` (an `unstable eval --out` folder: summary.json with results); a folder
    that is neither is one line, exit 2."""
    if not folder.is_dir():
        raise UnstableError(
            f"{folder} does not exist: give a run directory (runs/<name>) or an `unstable eval --out` folder"
        )
    if (folder / "config.toml").is_file():
        return "run"
    evaluation = (folder / "games").is_dir() or "results" in _read_json(folder / "summary.json")
    if evaluation and (folder / "summary.json").is_file():
        return "eval"
    raise UnstableError(
        f"{folder} is not a run: it has no config.toml (a run directory) nor summary.json and games/ (an "
        "`unstable eval --out` folder); give one of those (see `unstable runs`)"
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _config(folder: Path) -> tuple[str, list[dict[str, Any]]]:
    """config.toml's text, and the reward pipeline's stages as a table."""
    try:
        text = (folder / "config.toml").read_text()
    except OSError:
        return "", []
    from unstable_core.config.load import tomllib

    try:
        cfg = tomllib.loads(text)
    except ValueError:
        return text, []
    rows = [
        [stage, str(i + 1), str(t)]
        for stage in ("final", "step", "sampling")
        for i, t in enumerate(cfg.get(f"{stage}_transforms", []))
    ]
    note = (
        "final: once per game on the seats' outcomes; step: every turn; sampling: each batch (the advantage)"
    )
    return text, [
        {"title": f"Reward pipeline ({note})", "columns": ["stage", "order", "transform"], "rows": rows}
    ]


def _state(folder: Path, kind: str, summary: dict[str, Any], final: bool) -> tuple[str, list[str]]:
    """The run's state (running, finished, stopped and why) and the notes the page opens with; `final`: the
    run writing it at its end (its lock still held), whose state its summary says."""
    if kind == "eval":
        return "evaluation", []
    if final:
        why = summary.get("stop_reason") or ("aborted" if summary.get("aborted") else None)
        return ("finished" if why is None else f"stopped ({why})"), []
    from unstable_core.report.runs import run_row

    state = run_row(folder).state
    notes = []
    if state == "running":
        notes.append(
            "This run is still going: the report shows what was on disk when it was written; write it "
            "again with `unstable report` for more."
        )
    elif not summary:
        notes.append(
            "This run has no summary.json (it stopped before its end): the report shows what is on disk."
        )
    return state, notes


@attrs.define
class LegalScoring:
    """`unstable report --score-legal`: the last `games` games' legal answers scored with `model` (default:
    the run's) on `device`; `cost`, once scored: the line of what it cost."""

    games: int
    model: str | None = None
    device: str | None = None
    cost: str | None = None


def _score(folder: Path, games: list[dict[str, Any]], scoring: LegalScoring | None) -> list[str]:
    """Score the legal answers when asked; the line of what it cost (none when not asked)."""
    if scoring is None or scoring.games <= 0:
        return []
    from unstable_core.config.load import tomllib
    from unstable_core.report.html.legal_scores import score_legal

    model = scoring.model
    if model is None:
        try:
            model = tomllib.loads((folder / "config.toml").read_text())["model_name"]
        except (OSError, ValueError, KeyError) as exc:
            raise UnstableError(f"{folder}: no model_name in config.toml ({exc}); give --model") from exc
    scoring.cost = score_legal(folder, games[-scoring.games :], model, scoring.device).line()
    return [scoring.cost]


def collect(
    folder: Path, summary: dict[str, Any] | None = None, scoring: LegalScoring | None = None
) -> dict[str, Any]:
    """Everything the page shows of `folder`, as JSON-ready data; `summary`: the run's at its end (else
    summary.json, if any, and the state read from the run's files); `scoring`: see `LegalScoring`."""
    from unstable_core.report.checkpoint_rates import rates_from_games, run_games
    from unstable_core.report.html.games import browser_data
    from unstable_core.report.learning_verdict import learning_verdict
    from unstable_core.report.run_probes import probe_records

    kind = report_kind(folder)
    final = summary is not None
    summary = summary if final else _read_json(folder / "summary.json")
    state, notes = _state(folder, kind, summary, final)
    games = run_games(folder)
    notes += _score(folder, games, scoring)
    rates = rates_from_games(games)
    verdict = summary.get("learning") if state == "finished" else None
    if verdict is None and kind == "run":
        verdict = learning_verdict(rates).to_dict()
        if state != "finished":
            notes.append("The verdict is computed from the games played so far.")
    records = sec.metrics(folder)
    rating_charts, rating_tables = sec.rating_parts(sec.league_models(folder))
    probe_charts, probe_tables = sec.probe_parts([r for r in probe_records(folder) if "figures" in r])
    config_text, pipeline = _config(folder)
    evals = [folder] if kind == "eval" else sorted(p.parent for p in (folder / "eval").glob("*/summary.json"))
    return {
        "title": folder.resolve().name, "kind": kind, "state": state, "notes": notes,
        "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "verdict": verdict,
        "facts": _facts(summary, games),
        "sections": [
            {"id": "verdict", "title": "Verdict", "tables": [sec.verdict_table(verdict)] if verdict else []},
            {"id": "rates", "title": "Rates per checkpoint", "charts": sec.rate_charts(rates) + sec.eval_charts(records),
             "tables": [sec.rate_table(rates)] if rates else []},
            {"id": "ratings", "title": "TrueSkill ratings", "charts": rating_charts, "tables": rating_tables},
            {"id": "probes", "title": "Probes", "charts": probe_charts, "tables": probe_tables},
            {"id": "evaluations", "title": "Evaluations", "tables": sec.eval_tables(evals)},
            {"id": "learner", "title": "Learner", "charts": sec.loss_charts(records)},
            {"id": "config", "title": "Reward pipeline and config", "tables": pipeline, "text": config_text},
        ],
        "games": browser_data(games),
    }  # fmt: skip


def _facts(summary: dict[str, Any], games: list[dict[str, Any]]) -> list[list[str]]:
    """A few lines of the summary: wall time, games, disk use, why it stopped."""
    facts = [["games", str(len(games))]]
    if isinstance(summary.get("elapsed_s"), (int, float)):
        facts.append(["wall time", f"{summary['elapsed_s'] / 60:.1f} min"])
    if isinstance(summary.get("disk"), dict) and "bytes" in summary["disk"]:
        facts.append(["disk", f"{summary['disk']['bytes'] / 1e6:.1f} MB"])
    for key in ("stop_reason", "plots_error", "learning_error", "probes_error"):
        if summary.get(key):
            facts.append([key.replace("_", " "), str(summary[key])])
    return facts


def script_json(data: Any) -> str:
    """JSON that cannot end its <script> block nor open markup: `<`, `>` and `&` as \\u escapes."""
    data, _ = finite_json(data)
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _static(name: str) -> str:
    return resources.files("unstable_core.report.html").joinpath("static", name).read_text(encoding="utf-8")


def render(data: dict[str, Any]) -> str:
    """The page: its style, Chart.js, the data block and the page's script, all inline."""
    title = "".join(c for c in str(data.get("title", "run")) if c.isalnum() or c in "-_. ")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>unstable report: {title}</title><style>{_static('report.css')}</style></head>"
        '<body><div id="app"><p id="loading">Loading the report...</p></div>'
        f'<script type="application/json" id="report-data">{script_json(data)}</script>'
        f"<script>{_static('chart.umd.min.js')}</script>"
        f"<script>{_static('report.js')}</script></body></html>\n"
    )


def write_report(
    folder: str | Path,
    out: str | Path | None = None,
    summary: dict[str, Any] | None = None,
    scoring: LegalScoring | None = None,
) -> Path:
    """Write `folder`/report.html (or `out`) and return its path; `summary`, `scoring`: see `collect`."""
    folder = Path(folder)
    path = Path(out) if out is not None else folder / REPORT_FILE
    atomic_write_text(path, render(collect(folder, summary, scoring)))
    return path
