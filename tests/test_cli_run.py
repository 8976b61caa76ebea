"""`unstable play` through the command line on the tiny model, and the one-line errors of `unstable run`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from unstable_core.io import read_jsonl
from unstable_core.models import load_tokenizer


def unstable(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`python -m unstable_core ARGS` in a subprocess, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "unstable_core", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})},
    )


def test_play_records_the_exact_tokens_of_every_turn(tiny_model, tmp_path):
    proc = unstable(
        "play", "--games", "2", "--model", tiny_model, "--runs-dir", str(tmp_path), "--run-name", "play",
        "--max-generation-len", "8",
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr

    run_dir = tmp_path / "play"
    games = read_jsonl(run_dir / "games" / "games.jsonl")
    assert sorted(g["info"]["game_idx"] for g in games) == [0, 1]  # exactly --games 2
    tok = load_tokenizer(tiny_model)
    steps = [s for g in games for t in g["trajectories"] for s in t["steps"]]
    assert steps and not any(g["info"]["failed"] for g in games)
    for s in steps:
        assert tok.decode(s["prompt_ids"]) == s["obs"]
        assert s["obs"].startswith("<|im_start|>") and s["obs"].endswith("<|im_start|>assistant\n")
        # the backend's text is the completion decoded without special tokens (an <|im_end|> that ends it)
        assert tok.decode(s["completion_ids"], skip_special_tokens=True) == s["act"]
        assert 1 <= len(s["completion_ids"]) <= 8 and s["policy_version"] == 0
    assert (run_dir / "config.toml").is_file() and (run_dir / "registry.json").is_file()
    assert not (run_dir / "checkpoints").exists()  # play does not learn


A2C_HIDDEN = {"UNSTABLE_LOAD_PLUGINS": "unstable-samplers,unstable-rewards,unstable-reinforce"}


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--learner", "nope"], {}, "unknown learner 'nope'; installed learners: a2c, reinforce"),
        (["--learner", "a2c"], A2C_HIDDEN, "installed learners: reinforce; 'a2c' is provided by unstable-a2c: pip install unstable-a2c"),
        (["--batch-size", "0"], {}, "batch_size must be >= 1, got 0"),
        (["--error-allowance", "-1"], {}, "error_allowance must be >= 0, got -1"),
        (["--vllm-config", '{"bogus": 1}'], {}, "vllm_config: unknown key 'bogus'; allowed: the reference's keys"),
        (["--vllm-config", '{"temperature": 0.6}', "--temperature", "0.7"], {}, "vllm_config.temperature = 0.6 disagrees"),
        (["--fixed-opponent", "google/gemini-2.0-flash-lite-001"], {}, "is an API model"),
    ],
    ids=["unknown-learner", "uninstalled-a2c", "zero-batch-size", "negative-error-allowance", "unknown-vllm-key",
         "vllm-temperature-conflict", "api-opponent"],
)  # fmt: skip
def test_run_errors_are_one_line_without_traceback(tiny_model, tmp_path, args, env, expected):
    proc = unstable("run", "--model", tiny_model, "--runs-dir", str(tmp_path), *args, env=env, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert list(Path(tmp_path).iterdir()) == []  # nothing started, no empty run directory left behind
