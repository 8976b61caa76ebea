"""`unstable report`: one self-contained report.html of a run or an evaluation folder, game data as escaped
JSON, written by a run at its end, and a run directory that is not one as one line with exit status 2
(the page in a real browser: tests/test_report_browser.py)."""

from __future__ import annotations

import base64
import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from unstable_core.cli.main import cli
from unstable_core.report.html import sections
from unstable_core.report.html.page import collect, script_json, write_report
from unstable_core.run_lock import RunLock

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "run-7a23685"
PLANTED = "<script>window.__pwned=1</script>&amp;"


def copy_run(tmp_path: Path, name: str = "run") -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURE, run, ignore=shutil.ignore_patterns("checkpoints"))
    return run


def data_block(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def test_report_command_writes_one_offline_file(tmp_path):
    run = copy_run(tmp_path)
    out = CliRunner().invoke(cli, ["report", str(run)])
    assert out.exit_code == 0, out.output
    html = (run / "report.html").read_text()
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing to fetch: works offline
    assert "Content-Security-Policy" in html and "window.Chart=" in html  # Chart.js inlined
    data = data_block(html)
    assert data["state"] == "finished" and data["kind"] == "run"
    assert len(data["games"]["rows"]) == 40
    ids = {s["id"]: s for s in data["sections"]}
    assert ids["rates"]["charts"] and ids["ratings"]["charts"] and "learner =" in ids["config"]["text"]
    pipeline = ids["config"]["tables"][0]["rows"]
    assert ["sampling", "1", "normalize-by-env:z_score=true"] in pipeline


def test_game_text_is_escaped_data(tmp_path):
    text = script_json({"answer": PLANTED})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"answer": PLANTED}
    run = copy_run(tmp_path)
    path = run / "games" / "games.jsonl"
    games = [json.loads(line) for line in path.read_text().splitlines()]
    games[3]["trajectories"][0]["steps"][0]["action"] = PLANTED
    path.write_text("".join(json.dumps(g) + "\n" for g in games))
    html = write_report(run).read_text()
    assert PLANTED not in html
    chunk = data_block(html)["games"]["chunks"][0]
    turns = json.loads(gzip.decompress(base64.b64decode(chunk)))[3]["turns"]
    assert turns[0]["answer"] == PLANTED and turns[0]["logprob"] < 0 and turns[0]["tokens"] == 8


def test_a_run_still_going_says_so(tmp_path):
    run = copy_run(tmp_path)
    (run / "summary.json").unlink()
    lock = RunLock.acquire(run)
    try:
        data = collect(run)
    finally:
        lock.release()
    assert data["state"] == "running"
    assert any("still going" in n for n in data["notes"]) and data["verdict"]["sentence"].startswith(
        "no test"
    )


def test_not_a_run_is_one_line_exit_2(tmp_path):
    for folder in (tmp_path / "missing", tmp_path):
        out = CliRunner().invoke(cli, ["report", str(folder)])
        assert out.exit_code == 2, out.output
        lines = out.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error:") and "run" in lines[0]


def test_an_evaluation_folder_has_its_tables(tmp_path):
    out_dir = tmp_path / "eval"
    (out_dir / "games").mkdir(parents=True)
    shutil.copy(FIXTURE / "games" / "games.jsonl", out_dir / "games" / "games.jsonl")
    rate = {"k": 3, "n": 4, "rate": 0.75, "lo": 0.3, "hi": 0.95}
    result = {"model": "ckpt-1", "opponent": "random", "env": "TicTacToe-v0", "games": 4, "win_rate": rate}
    (out_dir / "summary.json").write_text(json.dumps({"results": [result], "probe_results": []}))
    data = collect(out_dir)
    assert data["kind"] == "eval"
    (table,) = next(s for s in data["sections"] if s["id"] == "evaluations")["tables"]
    assert table["rows"] == [["ckpt-1", "random", "TicTacToe-v0", "4", "0.750 [0.300, 0.950] (3/4)"]]


def test_the_end_of_a_run_writes_the_report(tmp_path):
    from unstable_core.runtime.recovery.shutdown import write_summary

    run = copy_run(tmp_path)
    summary = write_summary(run, {"elapsed_s": 3.0}, learn=True)
    assert summary["report"] == str(run / "report.html") and "report_error" not in summary
    assert data_block((run / "report.html").read_text())["state"] == "finished"


def test_checkpoints_read_as_ranges():
    assert (
        sections.versions_text([0, 1, 2, 3, 5, 7, 8]) == "0-3, 5, 7-8" and sections.versions_text([]) == "-"
    )


def test_a_yardstick_axis_holds_its_references():
    s = {
        "label": "exploitability",
        "x": [0, 1],
        "y": [0.366, 0.333],
        "lo": [0.366, 0.333],
        "hi": [0.366, 0.333],
    }
    lo, hi = sections.honest_range([s], {"uniform": 0.458, "nash": 0.0})
    assert lo == 0.0 and hi >= 0.458
    record = {"step": 0, "probe": "kuhn", "env_id": "KuhnPoker-v0", "figures": {"exploitability": {"value": 0.4, "low": 0.4, "high": 0.4, "n": 12, "exact": True}},
              "references": {"exploitability": {"uniform": 0.458, "nash": 0.0}}}  # fmt: skip
    charts, tables = sections.probe_parts([record, {**record, "step": 2}])
    assert charts[0]["y"][0] == 0.0 and charts[0]["y"][1] >= 0.458
    assert {r["label"] for r in charts[0]["refs"]} == {"uniform", "nash"} and len(tables[0]["rows"]) == 2


def test_legal_answers_scored_on_request_with_the_checkpoint_that_played(tiny_model, tmp_path):
    """`--score-legal 3`: the last 3 games' turns with legal answers get each answer's probability, ckpt-0's
    from the base model and ckpt-1's from the run's step-1 adapter; the cost is one line."""
    from unstable_core.model_loading import load_tokenizer

    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    tok = load_tokenizer(tiny_model)
    moves = ["[0]", "[4]", "[8]"]
    ids = [tok.encode(m[1:], add_special_tokens=False) for m in moves]
    path = run / "games" / "games.jsonl"
    games = [json.loads(line) for line in path.read_text().splitlines()]
    for g, uid in zip(games[-3:], ("ckpt-0", "ckpt-1", "base"), strict=True):
        step = next(t for t in g["trajectories"] if t["steps"])["steps"][0]
        step["model_uid"] = uid
        step["step_info"]["legal"] = {"moves": moves, "ids": ids, "played": 1}
    path.write_text("".join(json.dumps(g) + "\n" for g in games))
    out = CliRunner().invoke(
        cli, ["report", str(run), "--score-legal", "3", "--model", tiny_model, "--device", "cpu"]
    )
    assert out.exit_code == 0, out.output
    assert "scored the legal answers of 3 turns in 3 games with 2 checkpoint(s)" in out.output
    data = data_block((run / "report.html").read_text())
    details = json.loads(gzip.decompress(base64.b64decode(data["games"]["chunks"][0])))
    scored = [t["legal"] for d in details[-3:] for t in d["turns"] if t["legal"]]
    assert [s["source"].split(" (")[0] for s in scored] == [
        "scored by the base model",
        "scored by ckpt-1",
        "scored by the base model",
    ]
    assert all(len(s["probs"]) == 3 and 0 < sum(s["probs"]) <= 1 for s in scored)
    print(scored)
    assert scored[0]["probs"] == pytest.approx(
        scored[2]["probs"], rel=1e-4, abs=0
    )  # the same prompt, the base model
    assert scored[0]["probs"] != pytest.approx(
        scored[1]["probs"], rel=1e-4, abs=0
    )  # ckpt-1: its adapter on it
