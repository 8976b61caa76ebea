"""`unstable runs`: a finished, a stopped and a running run, read from their own files."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from unstable_core.cli.main import cli
from unstable_core.run_lock import RunLock


def _run(folder: Path, name: str, steps: int) -> Path:
    d = folder / name
    (d / "games").mkdir(parents=True)
    (d / "config.toml").write_text("learning_steps = 3\n")
    lines = [{"step": s, "time": 100.0 + 10 * s, "learner/loss": 0.1} for s in range(1, steps + 1)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return d


def test_runs_lists_finished_stopped_running(tmp_path):
    done = _run(tmp_path, "a-done", 3)
    (done / "summary.json").write_text(json.dumps({"elapsed_s": 42.0, "learning": {"sentence": "learned"}}))
    stopped = _run(tmp_path, "b-stopped", 2)
    (stopped / "summary.json").write_text(json.dumps({"elapsed_s": 9.0, "stop_reason": "too many failures"}))
    _run(tmp_path, "c-killed", 1)
    resumed = _run(tmp_path, "e-resumed-killed", 2)
    (resumed / "summary.json").write_text(json.dumps({"elapsed_s": 5.0}))
    with (resumed / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"event": "resume", "time": 4e9}) + "\n" + '{"cut by a kill')
    interrupted = _run(tmp_path, "f-interrupted", 2)  # Ctrl-C: a clean stop's summary, short of its steps
    (interrupted / "summary.json").write_text(json.dumps({"elapsed_s": 20.0, "learner_step": 2}))
    running = _run(tmp_path, "d-running", 2)
    (tmp_path / "not-a-run").mkdir()
    lock = RunLock.acquire(running)
    try:
        out = CliRunner().invoke(cli, ["runs", str(tmp_path), "--json"])
    finally:
        lock.release()
    assert out.exit_code == 0, out.output
    rows = {r["name"]: r for r in json.loads(out.output)}
    assert set(rows) == {"a-done", "b-stopped", "c-killed", "d-running", "e-resumed-killed", "f-interrupted"}
    assert rows["a-done"]["state"] == "finished" and rows["a-done"]["verdict"] == "learned"
    assert rows["a-done"]["steps"] == 3 and rows["a-done"]["wall_s"] == 42.0
    assert rows["b-stopped"]["state"] == "stopped (too many failures)"
    assert rows["c-killed"]["state"] == "stopped (killed: no summary)"
    assert rows["e-resumed-killed"]["state"] == "stopped (killed: no summary)"
    assert rows["f-interrupted"]["state"] == "stopped (at step 2 of 3)"
    assert rows["d-running"]["state"] == "running" and rows["d-running"]["wall_s"] == 10.0
    assert rows["a-done"]["disk_bytes"] > 0
    table = CliRunner().invoke(cli, ["runs", str(tmp_path)])
    assert table.exit_code == 0 and "a-done" in table.output


def test_runs_of_a_missing_folder_is_one_line_exit_2(tmp_path):
    out = CliRunner().invoke(cli, ["runs", str(tmp_path / "nope")])
    assert out.exit_code == 2
    assert out.output.strip().startswith("Error:") and len(out.output.strip().splitlines()) == 1
