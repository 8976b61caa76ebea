"""`unstable run --resume` after SIGKILL of the whole run (driver and every Ray process) at chosen points,
and what a run does when one of its actors dies (the tiny random-weight model, through the command line)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from unstable_core.io import read_jsonl
from unstable_core.league.league import league_path
from unstable_core.run_lock import lock_is_free
from unstable_core.runtime.recovery.resume import is_learner_record
from unstable_core.testing import TINY_RUN_ARGS

ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}


def launch(
    *args: str,
    pause_at: str | None = None,
    marker: Path | None = None,
    pause_s: float | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen:
    """`unstable run ARGS` in its own process group (so that a kill takes Ray's processes with it); with
    `pause_at`, the run pauses at that test hook point (unstable_core.fault_points) after writing `marker`,
    for `pause_s` seconds (default: until killed)."""
    env = {**ENV, "UNSTABLE_TEST_PAUSE_AT": f"{pause_at}:{marker}"} if pause_at else ENV
    if pause_s is not None:
        env = {**env, "UNSTABLE_TEST_PAUSE_S": str(pause_s)}
    return subprocess.Popen(
        [sys.executable, "-m", "unstable_core", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        cwd=cwd,
    )


def start(tiny_model: str, runs_dir: Path, *args: str, **pause) -> subprocess.Popen:
    return launch("--model", tiny_model, "--runs-dir", str(runs_dir), *TINY_RUN_ARGS, *args, **pause)


def resume(
    run_dir: Path, *args: str, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "unstable_core", "run", "--resume", str(run_dir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV, cwd=cwd)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the run and every process it started (Ray's too), as a preempted machine would."""
    procs = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(what, proc: subprocess.Popen, timeout: float = 240, poll_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert proc.poll() is None, f"the run ended early ({proc.returncode}): {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(poll_s)


def kill_when_paused(proc: subprocess.Popen, marker: Path) -> None:
    """SIGKILL the run once it has reached its pause point (it sleeps there: no race)."""
    wait_for(marker.exists, proc)
    kill_group(proc)


def steps_of(run_dir: Path) -> list[int]:
    return sorted(
        int(p.name.split("-")[1])
        for p in (run_dir / "checkpoints").glob("step-*")
        if p.name.split("-")[1].isdigit() and (p / "run_state.json").is_file()
    )


@pytest.fixture(scope="module")
def finished_run(tiny_model, tmp_path_factory) -> Path:
    """A finished 2-step run at `runs/r` under the returned folder, made once for the tests that take a copy
    (`copy_of`): written with a relative --runs-dir, so that the paths it records hold in the copy."""
    folder = tmp_path_factory.mktemp("finished")
    _, err = start(tiny_model, Path("runs"), "--run-name", "r", cwd=folder).communicate(timeout=300)
    assert steps_of(folder / "runs" / "r") == [1, 2], err[-3000:]
    return folder


def copy_of(finished_run: Path, tmp_path: Path) -> Path:
    """`finished_run`'s run directory copied to tmp_path/runs/r (resume it with cwd=tmp_path)."""
    shutil.copytree(finished_run / "runs", tmp_path / "runs")
    return tmp_path / "runs" / "r"


def run_state(run_dir: Path, step: int) -> dict:
    return json.loads((run_dir / "checkpoints" / f"step-{step}" / "run_state.json").read_text())


def test_resume_after_sigkill_during_collection_an_update_and_a_checkpoint_write(tiny_model, tmp_path):
    from safetensors.torch import load_file
    from unstable_reinforce.learner import REINFORCELearner

    run_dir, games = tmp_path / "r", tmp_path / "r" / "games" / "games.jsonl"
    mark = lambda name: tmp_path / f"paused-{name}"  # noqa: E731
    # 1) killed during collection, before the first update: the learner took its first batch, games go on
    proc = start(tiny_model, tmp_path, "--run-name", "r", "--learning-steps", "4", pause_at="batch-1",
                 marker=mark(1))  # fmt: skip
    kill_when_paused(proc, mark(1))
    assert steps_of(run_dir) == [] and read_jsonl(games)

    # 2) resumed (from step 0: no checkpoint yet), killed during update 2 (done in memory, not saved)
    kill_when_paused(launch("--resume", str(run_dir), pause_at="update-2", marker=mark(2)), mark(2))
    assert steps_of(run_dir) == [1]

    # 3) resumed from step 1, killed while checkpoint 3 is being written (its temporary folder, complete)
    kill_when_paused(launch("--resume", str(run_dir), pause_at="checkpoint-step-3", marker=mark(3)), mark(3))
    assert steps_of(run_dir) == [1, 2] and (run_dir / "checkpoints" / "step-3.tmp").is_dir()

    # 4) resumed to the end, with more learning steps than first asked (allowed, and recorded)
    done = resume(run_dir, "--learning-steps", "5")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr

    assert steps_of(run_dir) == [1, 2, 3, 4, 5]
    assert not list((run_dir / "checkpoints").glob("*.tmp"))
    for k in range(1, 6):  # every checkpoint complete: its state and adapter load, and the newest two's
        folder = run_dir / "checkpoints" / f"step-{k}"  # optimizer tensors (--keep-optimizer-states 2)
        assert json.loads((folder / "learner_state.json").read_text())["step"] == k
        assert load_file(str(folder / "adapter_model.safetensors"))
        optimizer = folder / "optimizer.safetensors"
        assert load_file(str(optimizer)) if k >= 4 else not optimizer.exists()
    state = json.loads((folder / "learner_state.json").read_text())
    learner = REINFORCELearner.create(tiny_model, device="cpu", run_dir=tmp_path / "check",
                               lora_config=state["config"]["lora_config"])  # fmt: skip
    learner.initialize_algorithm(**state["algorithm_cfg"])
    learner.load_checkpoint(folder)
    assert learner.step == 5

    records = read_jsonl(run_dir / "metrics.jsonl")
    learner_steps = [r["step"] for r in records if is_learner_record(r)]
    assert learner_steps == [1, 2, 3, 4, 5]  # none duplicated, none missing, in order
    resumes = [r for r in records if r.get("event") == "resume"]
    assert [r["resumed_from_step"] for r in resumes] == [0, 1, 2]
    assert [r["changed"] for r in resumes] == [{}, {}, {"learning_steps": [4, 5]}]

    for resumed in resumes[1:]:  # what the resumed actors hold is what the checkpoint saved
        saved = run_state(run_dir, resumed["resumed_from_step"])
        # ratings: every model's mu, sigma and games, read back from the live league
        for m in saved["league"]["models"]:
            assert resumed["ratings_loaded"][m["uid"]] == {k: m[k] for k in ("mu", "sigma", "games")}
        # reward baselines, read back from the live buffer
        assert resumed["rewards_loaded"] == saved["rewards"]
    assert run_state(run_dir, 2)["rewards"]["final"][0]["baselines"]  # non-empty: something was carried

    league = json.loads(league_path(run_dir).read_text())
    final = {m["uid"]: m for m in league["models"]}
    for m in run_state(run_dir, 5)["league"]["models"]:
        assert final[m["uid"]]["games"] >= m["games"]
    assert league["current"] == "ckpt-5"
    assert sorted(u for u in final if u.startswith("ckpt-")) == [f"ckpt-{k}" for k in range(6)]

    idx = [g["info"]["game_idx"] for g in read_jsonl(games)]
    assert len(idx) == len(set(idx))  # no game recorded twice across the four processes

    # 5) a checkpoint whose files load but that another learner wrote (a file that does not load is skipped
    # for an older checkpoint, see test_resume_fallback.py): refused before Ray starts, naming both learners
    # (before, the learner actor failed to start with that cause once Ray and the model were up)
    state["learner"] = "A2CLearner"
    (folder / "learner_state.json").write_text(json.dumps(state))
    broken = resume(run_dir, "--learning-steps", "6", timeout=60)
    assert broken.returncode == 2 and "Ray" not in broken.stdout + broken.stderr, broken.stderr[-3000:]
    assert broken.stderr.strip() == (
        f"Error: --resume {run_dir}: checkpoint {folder} was written by A2CLearner, not by the run's learner "
        "'reinforce' (REINFORCELearner); restore the run's own checkpoint, or start a new run"
    )
    assert steps_of(run_dir) == [1, 2, 3, 4, 5]  # nothing set aside or written


@pytest.mark.xdist_group("finished-run")
def test_resume_skips_a_last_checkpoint_that_does_not_load(finished_run, tmp_path):
    """The issue's case: a 2-step run whose last adapter is damaged (`SafetensorError: header too large`).
    Before: `--resume` said the run was complete (step 2 of 2), and with more steps the learner actor
    failed to start with a 40-line traceback. Now the files are read before Ray: the run resumes from step
    1 with one line saying so, and its logs hold no line of the damaged step 2 but the new one.
    The copy is also a run directory written before league.json (its league in registry.json): resumed, it
    keeps its league there; and a resumed run's progress shows the resumed step, not step 0, from the start."""
    import struct

    run_dir = copy_of(finished_run, tmp_path)  # 2 steps
    league_path(run_dir).rename(run_dir / "registry.json")
    adapter = run_dir / "checkpoints" / "step-2" / "adapter_model.safetensors"
    adapter.write_bytes(struct.pack("<Q", 1 << 40) + adapter.read_bytes()[8:])
    old_step_2 = [r for r in read_jsonl(run_dir / "metrics.jsonl") if is_learner_record(r) and r["step"] == 2]

    done = resume(run_dir, cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == (
        f"checkpoint step 2 does not load ({adapter}: Error while deserializing header: header too large "
        "(SafetensorError)): resuming from step 1, the newest that does; set aside as "
        "checkpoints/step-2.unreadable"
    )
    assert steps_of(run_dir) == [1, 2] and (run_dir / "checkpoints" / "step-2.unreadable").is_dir()
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records if is_learner_record(r)] == [1, 2]  # the new step 2 only
    assert read_jsonl(run_dir / "metrics.rolled-back.jsonl") == old_step_2
    (resumed,) = [r for r in records if r.get("event") == "resume"]
    assert resumed["resumed_from_step"] == 1 and resumed["skipped_checkpoints"][0]["step"] == 2
    progress = [line for line in done.stdout.splitlines() if "| step " in line]  # plain lines: not a terminal
    assert progress and all(re.search(r"\| step [12]/2 \|", line) for line in progress), progress
    assert not (run_dir / "league.json").exists()
    league = json.loads((run_dir / "registry.json").read_text())
    checkpoints = [m["uid"] for m in league["models"] if m["uid"].startswith("ckpt-")]
    assert league["current"] == "ckpt-2" and checkpoints == ["ckpt-0", "ckpt-1", "ckpt-2"]
    rolled = run_dir / "games" / "games.rolled-back.jsonl"
    idx = [g["info"]["game_idx"] for g in read_jsonl(run_dir / "games" / "games.jsonl") + read_jsonl(rolled)]
    assert len(idx) == len(set(idx))

    # no checkpoint loads: one line naming the newest's file, before anything starts
    for k in (1, 2):
        path = run_dir / "checkpoints" / f"step-{k}" / "adapter_model.safetensors"
        path.write_bytes(struct.pack("<Q", 1 << 40) + path.read_bytes()[8:])
    none = resume(run_dir, "--learning-steps", "3", timeout=60, cwd=tmp_path)
    assert none.returncode == 2 and "Ray" not in none.stdout + none.stderr
    assert none.stderr.strip() == (
        f"Error: --resume {run_dir}: no checkpoint of the run loads: {run_dir}/checkpoints/step-2/"
        "adapter_model.safetensors: Error while deserializing header: header too large (SafetensorError) "
        "(nor does the older one); restore that file from a copy, or start a new run"
    )


def files_of(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `run_dir` (but the lock) with its size and modification time."""
    return {
        str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in run_dir.rglob("*")
        if p.name != ".lock"
    }


def test_a_killed_driver_leaves_no_process_and_nothing_writes_after_its_lock_is_free(tiny_model, tmp_path):
    """kill -9 of the driver (only) while the learner writes checkpoint 2, where it pauses 2 s and then
    would go on. Before: Ray's DashboardAgent and RuntimeEnvAgent lived on for good, and the learner
    finished the checkpoint and the tracker wrote its metrics line after the run's lock was free."""
    run_dir, marker = tmp_path / "r", tmp_path / "paused"
    proc = start(tiny_model, tmp_path, "--run-name", "r", "--learning-steps", "3", pause_at="checkpoint-step-2",
                 marker=marker, pause_s=2)  # fmt: skip
    wait_for(marker.exists, proc)
    of_the_run = psutil.Process(proc.pid).children(recursive=True)
    try:
        assert len(of_the_run) >= 8  # Ray's GCS, raylet, agents and the run's actors
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait(timeout=30)
        while not lock_is_free(run_dir):
            assert time.monotonic() - killed_at < 30, "the lock was never let go"
            time.sleep(0.01)
        free = files_of(run_dir)
        time.sleep(4)  # the learner's pause is over: it would have finished the checkpoint by now
        assert files_of(run_dir) == free  # nothing written after the lock was let go
        assert not (run_dir / "checkpoints" / "step-2").exists()
        assert max(r.get("step", 0) for r in read_jsonl(run_dir / "metrics.jsonl")) == 1
        left = []
        for p in of_the_run:
            with contextlib.suppress(psutil.Error):
                if p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p.name())
        assert time.monotonic() - killed_at < 10 and left == []
    finally:
        for p in of_the_run:
            with contextlib.suppress(psutil.Error):
                p.kill()
    done = resume(run_dir)  # and the run goes on from checkpoint 1
    assert done.returncode == 0, done.stderr[-3000:]
    assert steps_of(run_dir) == [1, 2, 3]


@pytest.mark.xdist_group("finished-run")
def test_resume_of_a_finished_run_says_so_at_once(finished_run, tmp_path):
    """Before: --resume of a finished run started Ray and loaded the model, then did nothing (summary
    'learner step 0 / 2'). (A resumed run's progress and an old run directory's registry.json: in
    `test_resume_skips_a_last_checkpoint_that_does_not_load`, whose resume runs anyway.)"""
    run_dir = copy_of(finished_run, tmp_path)  # 2 steps
    started = time.monotonic()
    again = resume(run_dir, timeout=60, cwd=tmp_path)
    assert again.returncode == 2 and time.monotonic() - started < 30
    assert again.stderr.strip() == (
        f"Error: --resume {run_dir}: the run is complete (learner step 2 of 2): to train it further, give more "
        f"steps, e.g. `unstable run --resume {run_dir} --learning-steps 4`"
    )
    assert "Ray" not in again.stdout + again.stderr


def test_resume_refuses_an_option_that_changes_what_the_run_learns(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text('model_name = "m"\nlearner = "reinforce"\n')
    proc = resume(run_dir, "--learner", "a2c", timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "learner is 'reinforce' in the run, 'a2c' given" in lines[0]
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.toml"]  # nothing written
    proc = resume(run_dir, "--env", "Nim-v0-train", timeout=60)
    assert proc.returncode == 2 and "drop --env or start a new run" in proc.stderr  # the flag, not train_envs


def actor_pid(proc: subprocess.Popen, title: str, timeout: float = 240) -> int:
    """The pid of the Ray worker process whose title names `title` (e.g. 'Collector')."""
    found: list[int] = []

    def look() -> bool:
        for p in psutil.Process(proc.pid).children(recursive=True):
            try:
                if f"ray::{title}" in " ".join(p.cmdline()):
                    found.append(p.pid)
                    return True
            except psutil.Error:
                continue
        return False

    wait_for(look, proc, timeout)
    return found[0]


@pytest.mark.parametrize("actor", ["Collector", "LearnerActor"])
def test_a_dead_actor_stops_the_run_with_the_resume_line(tiny_model, tmp_path, actor):
    run_dir = tmp_path / "r"
    proc = start(tiny_model, tmp_path, "--run-name", "r", "--learning-steps", "50")
    try:
        pid = actor_pid(proc, actor)
        wait_for(lambda: (run_dir / "checkpoints" / "step-1").is_dir(), proc)  # the run is under way
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=150)  # before: the run hung (collector) or printed a traceback
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err + out
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]  # beside Ray's own log lines
    assert len(lines) == 1, err
    assert f"unstable run --resume {run_dir}" in lines[0]
    died = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("event") == "actor_died"]
    assert len(died) == 1
    assert died[0]["actor"] == ("the collector-0" if actor == "Collector" else "the learner")


def test_scheduler_state_round_trip_continues_the_samplers_streams():
    """A scheduler restored from `state_dict` (through JSON) makes the same choices as the one it was saved
    from, and a restored index base numbers games after the recorded ones."""
    from unstable_core.league.league import League
    from unstable_core.plugins import get_registry
    from unstable_core.runtime.actors.scheduler import GameScheduler
    from unstable_core.types import TrainEnvSpec

    env_sampler = get_registry().load("env_sampler", "adaptive")
    model_sampler = get_registry().load("model_sampler", "fixed")

    envs = [TrainEnvSpec(e, 2, 1) for e in ("TicTacToe-v0-train", "KuhnPoker-v0-train", "Nim-v0-train")]
    league = League()
    league.add_checkpoint("ckpt-0", None, 0)
    for name in ("a", "b", "c"):
        league.add_fixed(name)

    def scheduler(index_base: int = 0) -> GameScheduler:
        return GameScheduler(env_sampler(envs, seed=1), model_sampler(seed=1), index_base=index_base)

    first = scheduler()
    for _ in range(7):
        first.next_train(league)
    state = json.loads(json.dumps(first.state_dict()))
    second = scheduler(index_base=100)
    second.load_state_dict(state)
    ahead = [first.next_train(league) for _ in range(20)]
    again = [second.next_train(league) for _ in range(20)]
    assert [(g.env_id, sorted(p.model_uid for p in g.players)) for g in ahead] == [
        (g.env_id, sorted(p.model_uid for p in g.players)) for g in again
    ]
    assert [g.game_idx for g in again] == list(range(100, 120))
    fresh = scheduler(index_base=100)
    assert [fresh.next_train(league).env_id for _ in range(20)] != [g.env_id for g in again]


def test_a_dead_learner_worker_stops_the_run_naming_its_rank(tiny_model, tmp_path):
    """`--learner-workers 2`, rank 1 killed while it holds the batch of update 2 and rank 0 waits for it in
    the update's collectives. Before: `Error: run stopped: the learner failed: RuntimeError: [.../gloo/
    transport/tcp/pair.cc:553] Connection closed by peer ...`; now the dead rank and how to continue."""
    run_dir, marker = tmp_path / "r", tmp_path / "paused"
    proc = start(tiny_model, tmp_path, "--run-name", "r", "--learning-steps", "50", "--learner-workers", "2",
                 pause_at="rank-1-batch-2", marker=marker)  # fmt: skip
    try:
        wait_for(lambda: marker.exists() and marker.read_text().strip(), proc)
        os.kill(int(marker.read_text()), signal.SIGKILL)
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err + out
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert lines == [
        "Error: the learner worker of rank 1 actor died (its process died); the run stopped at its last "
        f"complete checkpoint (step 1): continue it with `unstable run --resume {run_dir}`"
    ], err[-3000:]
    died = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("event") == "actor_died"]
    assert [r["actor"] for r in died] == ["the learner worker of rank 1"]
