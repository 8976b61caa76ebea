"""`unstable run` end to end through the command line, with the tiny random-weight model: REINFORCE by
mirror self-play, and A2C against the fixed base model. Each run starts (and shuts down) its own Ray."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib
from safetensors import safe_open

from unstable_core.io import read_jsonl
from unstable_core.league.league import league_path
from unstable_core.runtime.recovery.resume import is_learner_record
from unstable_core.testing import TINY_RUN_ARGS

SMALL = TINY_RUN_ARGS


def unstable_run(tiny_model: str, runs_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m unstable_core run` on the tiny model; fails the test with its output when it fails."""
    cmd = [sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(runs_dir)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd + [*SMALL, *args], capture_output=True, text=True, timeout=420, env=env)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def is_eval_record(record: dict) -> bool:
    """A scheduled evaluation's record of metrics.jsonl (the others are the learner's, one per update)."""
    return any(k.startswith("eval/") for k in record)


def check_run_dir(run_dir: Path, tiny_model: str, learner: str) -> tuple[list[dict], dict]:
    """What every learning run leaves behind; returns (games.jsonl records, the league file)."""
    cfg = tomllib.loads((run_dir / "config.toml").read_text())
    assert (cfg["model_name"], cfg["learner"], cfg["learning_steps"], cfg["batch_size"]) == (
        tiny_model,
        learner,
        2,
        4,
    )

    for step in (1, 2):
        folder = run_dir / "checkpoints" / f"step-{step}"
        assert json.loads((folder / "learner_state.json").read_text())["step"] == step
        with safe_open(str(folder / "adapter_model.safetensors"), "pt") as f:
            lora_a = [k for k in f.keys() if "lora_A" in k]  # noqa: SIM118 (not a dict)
            assert lora_a and all(f.get_tensor(k).shape[0] == 4 for k in lora_a)  # --lora-config rank 4

    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if is_learner_record(m)]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["learner/batch_steps"] >= 4 and math.isfinite(m["learner/grad_norm"])

    games = read_jsonl(run_dir / "games" / "games.jsonl")
    finished = [g for g in games if not g["info"]["failed"]]
    idx = [g["info"]["game_idx"] for g in games]
    assert finished and len(idx) == len(set(idx))
    for g in finished:
        for s in (s for t in g["trajectories"] for s in t["steps"]):
            assert s["prompt_ids"] and 1 <= len(s["completion_ids"]) == len(s["logprobs"]) <= 8

    league = json.loads(league_path(run_dir).read_text())
    ckpts = {m["uid"]: m for m in league["models"] if m["kind"] == "checkpoint"}
    assert sorted(ckpts) == ["ckpt-0", "ckpt-1", "ckpt-2"]
    assert league["current"] == "ckpt-2"
    for step in (1, 2):
        assert Path(ckpts[f"ckpt-{step}"]["path_or_name"]) == run_dir / "checkpoints" / f"step-{step}"
    for m in league["models"]:
        assert math.isfinite(m["mu"]) and 0 < m["sigma"] <= 25 / 3 + 1e-9
    return finished, league


def check_printed_output(stdout: str, run_dir: Path) -> None:
    """Short labels in the progress lines, the summary opening with the sentence that summary.json records
    (what was learned, or why nothing could be tested), nothing cut off with an ellipsis, no NaN."""
    lines = stdout.splitlines()
    progress = [i for i, line in enumerate(lines) if line.startswith("[") and " s] | " in line]
    assert progress, stdout
    for i in progress:
        assert "TicTacToe-v0-train" not in lines[i] and "_rate" not in lines[i], lines[i]
    assert any("| train invalid " in lines[i] for i in progress), stdout
    learning = json.loads((run_dir / "summary.json").read_text())["learning"]
    assert learning["significance"] == 0.01 and learning["sentence"]
    assert lines[progress[-1] + 1] == f"result: {learning['sentence']}"
    assert "…" not in stdout and not re.search(r"\bnan\b", stdout, re.IGNORECASE), stdout


def check_probes(run_dir: Path, stdout: str) -> None:
    """--eval-probe: the base model once and each evaluated checkpoint in probes.jsonl; base vs last in
    summary.json and in the printed summary; a panel of curves.png."""
    probes = sorted(read_jsonl(run_dir / "probes.jsonl"), key=lambda r: r["step"])
    assert [(r["step"], r["model"], r["env_id"]) for r in probes] == [
        (0, "base", "TicTacToe-v0-train"),
        (1, "ckpt-1", "TicTacToe-v0-train"),
        (2, "ckpt-2", "TicTacToe-v0-train"),
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    changes = {c["figure"]: c for c in summary["probes"]}
    assert sorted(changes) == ["block_mass", "illegal_mass", "win_mass"]
    for name, change in changes.items():
        assert (change["base"], change["last"]) == (probes[0]["figures"][name], probes[2]["figures"][name])
        assert change["last_step"] == 2 and change["verdict"]
        assert f"tictactoe-tactics {name} (TicTacToe-v0-train), base vs ckpt 2: " in stdout
    assert [Path(p).name for p in summary["plots"]] == ["ratings.png", "curves.png"]
    check_report(run_dir, summary)


def check_report(run_dir: Path, summary: dict) -> None:
    """report.html, written at the end: finished, a chart per probe figure with its references."""
    from unstable_core.report.html.page import collect

    assert summary["report"] == str(run_dir / "report.html") and (run_dir / "report.html").is_file()
    data = collect(run_dir)
    assert data["state"] == "finished" and data["games"]["rows"]
    charts = next(s for s in data["sections"] if s["id"] == "probes")["charts"]
    assert sorted(c["title"].split(":")[0] for c in charts) == ["block_mass", "illegal_mass", "win_mass"]
    assert all(c["refs"] and tuple(c["y"]) == (0.0, 1.0) for c in charts)  # masses: 0-1, with uniform's line


def test_unstable_run_reinforce_mirror_self_play(tiny_model, tmp_path):
    proc = unstable_run(
        tiny_model, tmp_path, "--run-name", "reinforce", "--eval-every", "1", "--eval-games", "4",
        "--progress-every-s", "1", "--eval-probe", "tictactoe-tactics",
    )  # fmt: skip
    check_printed_output(proc.stdout, tmp_path / "reinforce")
    check_probes(tmp_path / "reinforce", proc.stdout)
    finished, league = check_run_dir(tmp_path / "reinforce", tiny_model, "reinforce")
    # scheduled evaluation: 4 games of checkpoint 1 and of checkpoint 2 against base, seats alternated,
    # logged against the checkpoint with their counts and interval; no trickle of other eval games
    evals = {m["step"]: m for m in read_jsonl(tmp_path / "reinforce" / "metrics.jsonl") if is_eval_record(m)}
    key = "eval/TicTacToe-v0-train/vs_base"
    assert sorted(evals) == [1, 2]
    for m in evals.values():
        assert (m[f"{key}/games"], m[f"{key}/failed"]) == (4, 0)
        assert m[f"{key}/wins"] + m[f"{key}/draws"] + m[f"{key}/losses"] == 4
        assert m[f"{key}/win_rate_lo"] <= m[f"{key}/win_rate"] <= m[f"{key}/win_rate_hi"]
    eval_games = [g for g in finished if g["info"]["eval"]]
    assert len(eval_games) == 8
    for version in (1, 2):
        mine = [g for g in eval_games if f"ckpt-{version}" in g["info"]["models"].values()]
        assert sorted(g["info"]["learner_pids"][0] for g in mine) == [0, 0, 1, 1]
    train = [g for g in finished if not g["info"]["eval"]]
    assert train
    for g in train:  # mirror self-play: one checkpoint at every seat, every seat learns
        assert len(set(g["info"]["models"].values())) == 1 and sorted(g["info"]["learner_pids"]) == [0, 1]
    for g in finished:
        if g["info"]["eval"]:  # the default evaluation game: the current checkpoint against the base model
            assert sorted(g["info"]["models"].values())[0] == "base" and len(g["info"]["learner_pids"]) == 1
    models = {m["uid"]: m for m in league["models"]}
    assert {m["kind"] for m in models.values()} == {"checkpoint", "fixed"} and models["base"][
        "kind"
    ] == "fixed"


def test_unstable_run_a2c_against_fixed_base(tiny_model, tmp_path):
    unstable_run(
        tiny_model,
        tmp_path,
        "--run-name",
        "a2c",
        "--learner",
        "a2c",
        "--sampler",
        "fixed",
        "--fixed-opponent",
        "base",
    )
    run_dir = tmp_path / "a2c"
    finished, league = check_run_dir(run_dir, tiny_model, "a2c")
    assert (run_dir / "checkpoints" / "step-2" / "critic" / "value_head.safetensors").is_file()
    learner_records = [m for m in read_jsonl(run_dir / "metrics.jsonl") if is_learner_record(m)]
    assert learner_records and all(math.isfinite(m["learner/value_loss"]) for m in learner_records)
    for g in finished:  # one learner seat, the other played by the base model
        models = g["info"]["models"]
        assert sorted(models.values())[0] == "base" and sorted(models.values())[1].startswith("ckpt-")
        assert models[str(g["info"]["learner_pids"][0])].startswith("ckpt-")
    # every rated game is one checkpoint against base, so base's game count is the checkpoints' sum
    models = {m["uid"]: m for m in league["models"]}
    assert models["base"]["kind"] == "fixed"
    assert (
        models["base"]["games"] == sum(m["games"] for m in models.values() if m["kind"] == "checkpoint") >= 1
    )
    assert models["base"]["sigma"] < 25 / 3  # rated at least once


def test_unstable_run_grpo_on_a_task_with_a_task_evaluation(tiny_model, tmp_path):
    """A generated task trained GRPO-style (groups of 2 answers to one question) and another task evaluated
    on every checkpoint: one-player games, whole groups, accuracy logged and shown per checkpoint."""
    proc = unstable_run(
        tiny_model, tmp_path, "--run-name", "task", "--env", "arithmetic-1", "--env-sampler-config",
        '{"repeat": 2}', "--sampling-transform", "group-relative", "--eval-task", "arithmetic-2",
        "--eval-every", "1", "--eval-games", "3", "--progress-every-s", "1",
    )  # fmt: skip
    run_dir = tmp_path / "task"
    finished, _ = check_run_dir(run_dir, tiny_model, "reinforce")
    train = [g for g in finished if not g["info"]["eval"]]
    assert train and all(g["info"]["env_id"] == "arithmetic-1" and g["info"]["num_turns"] == 1 for g in train)
    groups: dict[str, set] = {}
    for g in train:
        assert list(g["info"]["models"]) == ["0"] and g["info"]["group_size"] == 2
        groups.setdefault(g["info"]["group_id"], set()).add(g["trajectories"][0]["steps"][0]["obs"])
    assert all(len(prompts) == 1 for prompts in groups.values())  # a group answers one question
    assert all("Put your final answer within \\boxed{}" in p for ps in groups.values() for p in ps)
    evals = {m["step"]: m for m in read_jsonl(run_dir / "metrics.jsonl") if is_eval_record(m)}
    key = "eval/arithmetic-2/vs_none"
    assert sorted(evals) == [1, 2] and all(
        m[f"{key}/games"] + m[f"{key}/failed"] == 3 for m in evals.values()
    )
    assert "eval ckpt-2 arithmetic-2 accuracy " in proc.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "task accuracy" in summary["learning"]["sentence"]
