"""`unstable play` through the command line on the tiny model, and the one-line errors of `unstable run`."""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unstable_core.envs.specs import train_specs
from unstable_core.io import read_jsonl
from unstable_core.model_loading import load_tokenizer
from unstable_core.testing import TINY_RUN_ARGS


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
        # the default template, `move`, opens the answer with TextArena's bracket
        assert s["obs"].startswith("<|im_start|>") and s["obs"].endswith("<|im_start|>assistant\n[")
        # the backend's text is the completion decoded without special tokens (an <|im_end|> that ends it)
        assert tok.decode(s["completion_ids"], skip_special_tokens=True) == s["act"]
        assert 1 <= len(s["completion_ids"]) <= 8 and s["policy_version"] == 0
    assert (run_dir / "config.toml").is_file() and (run_dir / "league.json").is_file()
    assert not (run_dir / "checkpoints").exists()  # play does not learn
    assert "result:" not in proc.stdout and "learning" not in json.loads(
        (run_dir / "summary.json").read_text()
    )


A2C_HIDDEN = {"UNSTABLE_LOAD_PLUGINS": "unstable-samplers,unstable-rewards,unstable-reinforce"}


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--learner", "nope"], {}, "unknown learner 'nope'; installed learners: a2c, cispo, mmd, neurd, ppo, reinforce, reinforce-legal"),
        (["--learner", "a2c"], A2C_HIDDEN, "installed learners: reinforce, reinforce-legal; 'a2c' is provided by unstable-a2c: pip install unstable-a2c"),
        (["--batch-size", "0"], {}, "batch_size must be >= 1, got 0"),
        (["--error-allowance", "-1"], {}, "error_allowance must be >= 0, got -1"),
        (["--vllm-config", '{"bogus": 1}'], {}, "vllm_config: unknown key 'bogus'; allowed: UnstableBaselines v0.2's keys"),
        (["--vllm-config", '{"temperature": 0.6}', "--temperature", "0.7"], {}, "vllm_config.temperature = 0.6 disagrees"),
        (["--fixed-opponent", "google/gemini-2.0-flash-lite-001"], {}, "is an API model"),
        (["--env", "Bogus-v0"], {}, "--env 'Bogus-v0' is not a game or task id"),
        (["--template", "bogus"], {}, "unknown prompt template 'bogus'"),
        (["--learning-rate", "0"], {}, "learning_rate must be > 0"),
        (["--buffer-size", "2", "--batch-size", "4", "--mini-batch-size", "2"], {}, "buffer_size (2) must be >= batch_size (4)"),
        (["--model", "/no/such/model"], {}, "model folder '/no/such/model' does not exist"),
        (["--model", "someorg/some-model"], {"HF_HUB_OFFLINE": "1"}, "'someorg/some-model' is not a local folder nor in the Hugging Face cache"),
        (["--tracker", "jsonl", "--tracker", "wandb"], {}, "tracker 'wandb' needs the package 'wandb'"),
        (["--run-name", "../escape"], {}, "must be a plain folder name"),
        # every option, the components' own included, before Ray and before the run folder (issue 18.6)
        (["--top-p", "0", "--run-name", "t"], {}, "top_p must be > 0.0 and <= 1, got 0.0"),
        (["--sampler-config", '{"bogus": 1}'], {}, "--sampler-config mirror: unknown option bogus; mirror takes no options"),
        (["--sampler", "lagged", "--sampler-config", '{"k": 0}'], {}, "--sampler-config lagged: AsynchronousModelSampler: k must be an integer >= 1, got 0; lagged takes k"),
        (["--env-sampler-config", '{"bogus": 1}'], {}, "--env-sampler-config random: unknown option bogus; random takes repeat"),
        (["--algorithm-config", '{"bogus": 1}'], {}, "--algorithm-config: unknown reinforce option(s) bogus; allowed: none"),
        (["--learner", "a2c", "--algorithm-config", '{"gamma": 2}'], {}, "--algorithm-config: a2c gamma must be a number in [0, 1], got 2"),
        (["--learner", "ppo", "--importance-cap", "2"], {}, "--importance-cap: ppo weights for the sampler itself (behaviour_weight_cap in --algorithm-config); drop --importance-cap"),
        (["--lora-config", '{"lora_rank": 0}'], {}, "lora_config.lora_rank must be an integer >= 1, got 0"),
        (["--lora-config", '{"target_modules": ["nope"]}'], {}, "none of lora_config.target_modules ['nope'] is a linear layer"),
        (["--env", "TicTacToe-v0-train:3"], {}, "--env TicTacToe-v0-train:3: the game cannot be set up for 3 players"),
        (["--device", "bogus"], {}, "--device 'bogus' is not a torch device"),
        (["--seed", str(2**64)], {}, "seed must be a 64-bit integer"),
    ],
    ids=["unknown-learner", "uninstalled-a2c", "zero-batch-size", "negative-error-allowance", "unknown-vllm-key",
         "vllm-temperature-conflict", "api-opponent", "bogus-env", "bogus-template", "zero-learning-rate",
         "buffer-below-batch", "missing-model-folder", "hub-id-offline", "wandb-missing", "escaping-run-name",
         "zero-top-p", "unknown-sampler-option", "lagged-k-zero", "unknown-env-sampler-option",
         "unknown-algorithm-option", "a2c-gamma-above-1", "ppo-with-importance-cap", "zero-lora-rank",
         "lora-targets-not-in-model", "three-player-tictactoe", "bogus-device", "seed-beyond-64-bits"],
)  # fmt: skip
def test_run_errors_are_one_line_without_traceback(tiny_model, tmp_path, args, env, expected):
    """Status 2 means no run folder (README): before, --top-p 0 or a bad component option (sampler,
    algorithm, LoRA, player count, device) stopped only after Ray started, and left `runs/t` behind."""
    if "wandb" in args and importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    # a timeout: before these checks, --env Bogus-v0 or --template bogus ran (failing every game) forever
    proc = unstable("run", "--model", tiny_model, "--runs-dir", str(tmp_path), *args, env=env, timeout=90)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert list(Path(tmp_path).iterdir()) == []  # nothing started, no empty run directory left behind


def test_play_options_are_runconfigs_own(monkeypatch):
    """play's run options are generated from RunConfig (help and default written once, None when not given),
    and what it asks of the run is one RunConfig: --players fills in the seats an --env leaves out."""
    import attrs
    from click.testing import CliRunner

    from unstable_core.cli import run as run_cli
    from unstable_core.config import RunConfig
    from unstable_core.runtime.run import Run

    fields = attrs.fields_dict(RunConfig)
    params = {p.name: p for p in run_cli.play.params}
    for name in run_cli.PLAY_FIELDS:
        assert params[name].default is None and params[name].help.startswith(fields[name].metadata["help"])
    seen = []
    monkeypatch.setattr(Run, "open", classmethod(lambda cls, cfg, **kw: seen.append(cfg) or cfg))
    monkeypatch.setattr(run_cli, "execute", lambda run, steps, title, max_games: {"title": title})
    args = [
        "--env",
        "TicTacToe-v0-train",
        "--env",
        "KuhnPoker-v0-train:2:2",
        "--players",
        "2",
        "--games",
        "3",
    ]
    out = CliRunner().invoke(run_cli.play, [*args, "--opponent", "base", "--runs-dir", "elsewhere"])
    assert out.exit_code == 0, out.output
    (cfg,) = seen
    specs = [(s.env_id, s.num_players, s.num_actors) for s in train_specs(cfg)]
    assert specs == [("TicTacToe-v0-train", 2, 1), ("KuhnPoker-v0-train", 2, 2)]
    assert (cfg.sampler, cfg.fixed_opponents, cfg.num_train_workers, cfg.runs_dir) == (
        "fixed",
        ["base"],
        3,
        "elsewhere",
    )
    assert (cfg.final_transforms, cfg.step_transforms, cfg.num_eval_workers) == ([], [], 0)
    assert (cfg.model_name, cfg.temperature) == (fields["model_name"].default, fields["temperature"].default)


def test_play_with_an_unknown_env_is_one_line_before_any_game(tiny_model, tmp_path):
    """Before: 2 failing games, 'failed 2' with no cause and exit status 0."""
    proc = unstable("play", "--env", "Bogus-v0", "--games", "2", "--model", tiny_model, "--runs-dir", str(tmp_path),
                    timeout=90)  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        "Error: --env 'Bogus-v0' is not a game or task id (`unstable envs` lists them; a task file ends in .jsonl)"
    )
    assert list(Path(tmp_path).iterdir()) == []


def test_a_runs_dir_that_is_a_file_is_one_line(tiny_model, tmp_path):
    afile = tmp_path / "runs"
    afile.write_text("")
    proc = unstable("run", "--model", tiny_model, "--runs-dir", str(afile), timeout=90)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"Error: --runs-dir {str(afile)!r} is a file, not a directory: give a folder"
    ]


def test_an_unwritable_runs_dir_is_one_line(tiny_model):
    """Even as root: nobody creates folders in sysfs."""
    try:
        os.mkdir("/sys/unstable-probe")
    except OSError:
        pass
    else:
        os.rmdir("/sys/unstable-probe")
        pytest.skip("/sys is writable here")
    proc = unstable("run", "--model", tiny_model, "--runs-dir", "/sys", timeout=90)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --runs-dir '/sys' is not writable ("), lines


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The one `Error:` line of stderr, besides Ray's own start-up log lines (time-stamped)."""
    lines = [
        line for line in proc.stderr.strip().splitlines() if not re.match(r"\d{4}-\d\d-\d\d \d\d:", line)
    ]
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


def test_a_run_whose_games_all_fail_stops_with_exit_1_and_the_cause(tiny_model, tmp_path):
    """Every game longer than --max-turns 1 fails (invalid moves retried up to 3 times): before, nothing was shown and the learner waited forever."""
    proc = unstable("run", "--model", tiny_model, "--runs-dir", str(tmp_path), "--run-name", "r", "--max-turns", "1",
                    "--error-allowance", "3", "--failure-window", "4", "--num-train-workers", "2", "--num-eval-workers", "0",
                    "--max-generation-len", "4", timeout=240)  # fmt: skip
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert "run stopped: every one of the first 4 games failed" in line and "max_turns=1" in line
    assert "failed: " in proc.stdout and "max_turns=1" in proc.stdout  # the first occurrence, shown
    games = read_jsonl(tmp_path / "r" / "games" / "games.jsonl")
    assert len(games) >= 4 and all(g["info"]["failed"] and "max_turns=1" in g["info"]["error"] for g in games)


def test_play_exits_non_zero_when_every_game_failed(tiny_model, tmp_path):
    """Before: exit status 0 and 'failed 2' with no cause."""
    proc = unstable("play", "--games", "2", "--max-turns", "1", "--error-allowance", "3", "--model", tiny_model, "--runs-dir", str(tmp_path),
                    "--max-generation-len", "4", timeout=240)  # fmt: skip
    assert proc.returncode == 1
    assert "every one of the 2 games failed: " in _one_error_line(proc)


BAD_PLUGIN = """
from unstable_core import hookimpl
from unstable_core.rewards import FinalRewardTransform
from unstable_reinforce.learner import REINFORCELearner


class Exploding(FinalRewardTransform):
    def __call__(self, rewards, env_id=None):
        raise ZeroDivisionError("baseline of an empty window")


class NaNLossLearner(REINFORCELearner):
    def update(self, batch):
        metrics = super().update(batch)
        metrics.update(loss=float("nan"), skipped_nonfinite=1.0)  # as an update whose gradient was NaN
        return metrics


class RaisingLearner(REINFORCELearner):
    def update(self, batch):
        raise RuntimeError("simulated out of memory")


@hookimpl
def register_reward_transforms(register):
    register("exploding", Exploding)


@hookimpl
def register_learners(register):
    register("nan-loss", NaNLossLearner)
    register("raising", RaisingLearner)
"""


def with_bad_plugin(tmp_path: Path) -> dict[str, str]:
    """Install BAD_PLUGIN (a distribution with an `unstable` entry point) on a PYTHONPATH; its env."""
    site = tmp_path / "site"
    dist = site / "bad_run_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "bad_run_plugin.py").write_text(BAD_PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-run-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[unstable]\nbad = bad_run_plugin\n")
    return {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def test_a_final_transform_that_raises_stops_the_run_in_one_line(tiny_model, tmp_path):
    """A plugin's transform raising in the buffer actor: before, the error lived in Ray's worker logs only,
    the screen said 'failed 0' and the learner waited forever. A transform returning NaN is refused by the
    same pipeline with an UnstableError (tests/test_reward_pipeline.py) and reaches the screen this way."""
    proc = unstable("run", "--model", tiny_model, "--runs-dir", str(tmp_path / "runs"), "--final-transform",
                    "exploding", "--num-train-workers", "2", "--num-eval-workers", "0", "--max-generation-len", "4",
                    env=with_bad_plugin(tmp_path), timeout=240)  # fmt: skip
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert "final reward transform Exploding raised ZeroDivisionError: baseline of an empty window" in line
    assert "--debug" in line


def test_non_finite_updates_in_a_row_stop_the_run_and_are_counted(tiny_model, tmp_path):
    proc = unstable("run", "--model", tiny_model, "--runs-dir", str(tmp_path / "runs"), "--run-name", "r", *TINY_RUN_ARGS,
                    "--learner", "nan-loss", "--learning-steps", "5", "--max-nonfinite-updates", "2",
                    env=with_bad_plugin(tmp_path), timeout=300)  # fmt: skip
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert "run stopped: the learner failed: 2 learner updates in a row had a non-finite loss" in line
    logged = [r for r in read_jsonl(tmp_path / "runs" / "r" / "metrics.jsonl") if "learner/loss" in r]
    assert [(r["step"], r["learner/loss"], r["learner/nonfinite_updates"]) for r in logged] == [
        (1, None, 1.0), (2, None, 2.0),
    ]  # fmt: skip
    assert logged[-1]["counts/nonfinite_values"] >= 2  # each NaN loss written as null, and counted


def test_a_learner_that_raises_stops_the_run_in_one_line(tiny_model, tmp_path):
    proc = unstable("run", "--model", tiny_model, "--runs-dir", str(tmp_path / "runs"), *TINY_RUN_ARGS,
                    "--learner", "raising", env=with_bad_plugin(tmp_path), timeout=300)  # fmt: skip
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert line == (
        "Error: run stopped: the learner failed: RuntimeError: simulated out of memory (rerun with --debug "
        "for the traceback)"
    )


def test_debug_shows_the_traceback_too(tiny_model, tmp_path):
    proc = unstable("--debug", "run", "--model", tiny_model, "--runs-dir", str(tmp_path), "--env", "Bogus-v0",
                    timeout=90)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("Error: --env 'Bogus-v0'")


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["run", "--config", "TMP"], {}, "Error: config file 'TMP' is a folder: give a TOML file"),
        (["run", "--resume", "TMP/nope"], {}, "Error: --resume TMP/nope does not exist: pass the folder of a run"),
        (["plugins"], {"UNSTABLE_STRICT_PLUGINS": "maybe"}, "Error: UNSTABLE_STRICT_PLUGINS='maybe' is not understood"),
    ],
    ids=["config-is-a-folder", "resume-of-nothing", "strict-plugins-maybe"],
)  # fmt: skip
def test_a_wrong_path_or_variable_says_what_is_wrong(tmp_path, args, env, expected):
    """Before: a --config folder 'does not exist', --resume of a missing folder had 'no config.toml there',
    and UNSTABLE_STRICT_PLUGINS=maybe was accepted without a word (exit 0)."""
    args = [a.replace("TMP", str(tmp_path)) for a in args]
    proc = unstable(*args, env=env, timeout=90)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(expected.replace("TMP", str(tmp_path)))
    assert list(tmp_path.iterdir()) == []


def make_unwritable(folder: Path):
    """Make `folder` and everything in it unwritable; returns how to undo it, or None where this machine
    cannot (root ignores permission bits: there the immutable attribute does it, where chattr works)."""
    paths = [folder, *folder.rglob("*")]
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in paths}
        for p in paths:
            p.chmod(modes[p] & ~0o222)
        return lambda: [p.chmod(m) for p, m in modes.items()]
    undo = lambda: subprocess.run(["chattr", "-R", "-i", str(folder)], capture_output=True)  # noqa: E731
    if shutil.which("chattr") is None:
        return None
    for path in paths:  # a file the run renames meanwhile is gone: the folders' own attribute is what counts
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
        if not done and (path.is_dir() or path == folder):
            undo()
            return None
    return undo


def test_a_run_folder_that_becomes_unwritable_stops_the_run_in_one_line(tiny_model, tmp_path):
    """Before: two chained PermissionError tracebacks (the learner's, then the driver's own while it
    stopped) and no `Error:` line. Now: one line naming the file and the cause, and how to go on."""
    run_dir = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(tmp_path),
         "--run-name", "r", *TINY_RUN_ARGS, "--learning-steps", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    undo = None
    try:
        games = run_dir / "games" / "games.jsonl"
        deadline = time.monotonic() + 240
        while not (games.is_file() and games.stat().st_size):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
            time.sleep(0.1)
        undo = make_unwritable(run_dir)
        if undo is None:
            pytest.skip("cannot make a folder unwritable here (root without chattr)")
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if undo is not None:
            undo()
    assert proc.returncode == 1
    line = _one_error_line(subprocess.CompletedProcess(proc.args, 1, out, err))
    assert re.match(
        rf"Error: run stopped: .* failed: {re.escape(str(run_dir))}/\S*: (Operation not permitted|Permission denied)",
        line,
    ), line
    assert line.endswith(f"fix that, then continue it with `unstable run --resume {run_dir}`")
