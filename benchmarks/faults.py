"""Fault injection: kill actors of a run, resume it whenever it stops, check the run directory.

A kill falls at a random moment 0-T s after each (re)start's first new checkpoint, so that every start
makes progress and kills land during collection, updates and checkpoint writes alike.

    python3 benchmarks/faults.py [--steps 150] [--every 4] [--kills 7] [--kinds collector,learner]
    python3 benchmarks/faults.py --steps 40 --repeat 4            # groups of 4 games (GRPO), TicTacToe
    python3 benchmarks/faults.py --steps 20 --learner-workers 2 --kinds learner,driver --kills 4

Without --model the run uses a tiny random-weight model (seconds per step on a CPU); `--model smollm2-135m`
uses the embedded default. Each kill is a SIGKILL of one Ray actor's process, or of the driver (the
`unstable run` process itself); the kinds (collector, buffer, league, recorder, learner, inference,
driver) are killed in a shuffled cycle, so --kills 7 kills each once. An inference actor is restarted by
Ray (its games replayed); any other actor's death stops the run with the line `unstable run --resume
RUN_DIR`, and the benchmark then resumes it. After the driver's kill the benchmark waits for the run's
lock to be free, counts the processes of the run (the driver's descendants before the kill) still alive
10 s after the kill and the files of the run folder changed after the lock was free, then resumes. Every
wait has a limit: a run that makes no progress (no new checkpoint, no exit) for --hang-s seconds is a
hang, killed and resumed.

At the end it prints: actors killed (by kind); inference restarts the runs saw and games they replayed;
resumes; hangs; games lost, measured against what was played (each process's `stopped` event in
metrics.jsonl says how many games each collector had the recorder record, which it waits for before a
game's steps and rating go on; those of its game indices missing from games.jsonl are lost; a collector
that was killed cannot say, and is counted apart; games in flight at a kill are played again, not lost);
games duplicated (a game index recorded twice); cut lines in games.jsonl; learner steps duplicated or missing in
metrics.jsonl; checkpoints intact (every step-1..N folder with its adapter and optimizer tensors loadable);
whether the final step equals the steps asked for.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from unstable_core.cli.options import add_config_argument
from unstable_core.league.league import league_path
from unstable_core.run_lock import lock_is_free
from unstable_core.runtime.recovery.resume import is_learner_record

KINDS = {  # kind -> the actor classes whose Ray worker title (`ray::<Class>...`) names it
    "collector": ("Collector",),
    "buffer": ("StepBuffer", "EpisodeBuffer"),
    "league": ("LeagueActor",),
    "recorder": ("RecorderActor",),
    "learner": ("LearnerActor",),
    "inference": ("InferenceActor",),
    "driver": (),  # the `unstable run` process itself
}
SMALL = [
    "--batch-size", "4", "--mini-batch-size", "2", "--max-generation-len", "8", "--num-train-workers", "4",
    "--device", "cpu", "--lora-config", '{"lora_rank": 4, "lora_alpha": 8}',
]  # fmt: skip


def actor_pids(proc: subprocess.Popen) -> dict[str, list[int]]:
    """Ray worker processes of the run by kind."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process(proc.pid).children(recursive=True):
            try:
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                continue
            for kind, classes in KINDS.items():
                if any(f"ray::{c}" in cmd for c in classes):
                    out[kind].append(p.pid)
    return out


def kill_group(proc: subprocess.Popen) -> None:
    pids = [proc.pid]
    with contextlib.suppress(psutil.Error):
        pids += [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def launch(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(
        [sys.executable, "-m", "unstable_core", "run", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def files_of(run_dir: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.name != ".lock"}


def kill_driver(proc: subprocess.Popen, run_dir: Path, wait_s: float = 10.0) -> tuple[float, int, int]:
    """SIGKILL the driver alone; returns (seconds until the run's lock was free, processes of the run still
    alive `wait_s` after the kill, files changed after the lock was free)."""
    procs = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    proc.wait(timeout=30)
    while not lock_is_free(run_dir) and time.monotonic() - killed_at < wait_s:
        time.sleep(0.005)
    lock_s = time.monotonic() - killed_at
    free = files_of(run_dir)
    time.sleep(max(0.0, killed_at + wait_s - time.monotonic()))
    left = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            left += p.status() != psutil.STATUS_ZOMBIE
    for p in procs:  # leave no process behind, whatever the run left
        with contextlib.suppress(psutil.Error):
            p.kill()
    return lock_s, left, sum(v != free.get(k) for k, v in files_of(run_dir).items())


def games_lost(records: list[dict], idx: list[int]) -> tuple[int, int, int, int]:
    """(games recorded for the collectors that answered at their process's stop, of those the ones missing
    from games.jsonl, collectors that could not say (killed), processes without a `stopped` event).

    A process numbers its games from its `index_base` (after every game recorded before it), collector i
    of n takes the indices base + k * n + i; the process's range ends where the next process's begins."""
    bases = sorted({r["next_game_index"] for r in records if r.get("event") == "resume"})
    starts = 1 + len(bases)
    sent = lost = unknown = 0
    stopped = [r for r in records if r.get("event") == "stopped"]
    for r in stopped:
        base, n = r["index_base"], len(r["games_sent"])
        end = min((b for b in bases if b > base), default=float("inf"))
        mine = [i for i in idx if base <= i < end]
        for shard, count in enumerate(r["games_sent"]):
            if count is None:
                unknown += 1
                continue
            recorded = sum(1 for i in mine if (i - base) % n == shard)
            sent += count
            lost += max(0, count - recorded)
    return sent, lost, unknown, starts - len(stopped)


def check_run(run_dir: Path, steps: int) -> dict[str, object]:
    """What the run directory holds at the end."""
    from safetensors import safe_open

    lines = (run_dir / "games" / "games.jsonl").read_text().splitlines()
    games, broken = [], 0
    for line in lines:
        try:
            games.append(json.loads(line))
        except json.JSONDecodeError:
            broken += 1
    idx = [g["info"]["game_idx"] for g in games]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    logged = [r["step"] for r in records if is_learner_record(r)]
    intact = 0
    for k in range(1, steps + 1):
        folder = run_dir / "checkpoints" / f"step-{k}"
        try:
            assert json.loads((folder / "learner_state.json").read_text())["step"] == k
            json.loads((folder / "run_state.json").read_text())
            for name in ("adapter_model.safetensors", "optimizer.safetensors"):
                with safe_open(str(folder / name), "pt") as f:
                    assert list(f.keys())
            intact += 1
        except Exception:
            pass
    league = json.loads(league_path(run_dir).read_text())
    stopped = [r for r in records if r.get("event") == "stopped"]
    sent, lost, unknown, unmeasured = games_lost(records, idx)
    events = collections.Counter(r["event"] for r in records if "event" in r)
    return {
        "inference restarts seen by the runs": str(events.get("actor_restarted", 0)),
        "games replayed (counts/inference_retries)": str(sum(r["inference_retries"] or 0 for r in stopped)),
        "actor deaths recorded (metrics.jsonl)": str(
            events.get("actor_died", 0) + events.get("actor_hung", 0)
        ),
        "games recorded": str(len(games)),
        "games lost (recorded for a collector, not in games.jsonl)": (
            f"{lost} of {sent}"
            + (f" ({unknown} killed collectors could not say)" if unknown else "")
            + (f" ({unmeasured} processes killed whole: not measured)" if unmeasured else "")
        ),
        "games duplicated": str(len(idx) - len(set(idx))),
        "cut lines in games.jsonl": str(broken),
        "learner steps duplicated": str(len(logged) - len(set(logged))),
        "learner steps missing": str(len(set(range(1, steps + 1)) - set(logged))),
        "checkpoints intact": f"{intact} / {steps}",
        "final step = asked": str(league.get("current") == f"ckpt-{steps}" and intact == steps),
    }


def restarts_seen(run_dir: Path) -> int:
    """`actor_restarted` events in metrics.jsonl (the run saw an inference actor come back)."""
    path = run_dir / "metrics.jsonl"
    return path.read_text().count('"event": "actor_restarted"') if path.is_file() else 0


def checkpoints(run_dir: Path) -> int:
    return len(list((run_dir / "checkpoints").glob("step-*[0-9]")))


def parse_args() -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """The benchmark's options, and the parser (for its usage errors)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # the run's settings, as RunConfig has them (type, check); this benchmark's defaults
    add_config_argument(parser, "--model", default=None, help="default: a tiny random-weight model")
    add_config_argument(
        parser,
        "--steps",
        "learning_steps",
        default=150,
        help="learning steps of the run (enough for every kill to land on a quiet machine)",
    )
    parser.add_argument(
        "--every", type=float, default=4.0, help="a kill falls 0-T s after a start's first checkpoint"
    )
    parser.add_argument("--kills", type=int, default=7, help="actors (or the driver) to kill at most")
    parser.add_argument("--kinds", default=",".join(KINDS), help="kinds of actor to kill, in a cycle")
    parser.add_argument(
        "--hang-s", type=float, default=300.0, help="a run that makes no progress this long hangs"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeat", type=int, default=1, help="games per group (GRPO's G, with the group-relative baseline)"
    )
    add_config_argument(parser, "--learner-workers", help="data-parallel learner workers (a kill takes one)")
    add_config_argument(
        parser, "--runs-dir", default=None, help="where run directories are made (default: a temporary one)"
    )
    return parser.parse_args(), parser


def first_args(args: argparse.Namespace, model: str, runs_dir: Path) -> list[str]:
    """The `unstable run` arguments of the first start."""
    first = ["--model", model, "--runs-dir", str(runs_dir), "--run-name", "faults", "--learning-steps"]
    first += [str(args.steps), *SMALL]
    if args.repeat > 1:
        first += ["--env-sampler-config", json.dumps({"repeat": args.repeat})]
        first += ["--sampling-transform", "group-relative"]
    if args.learner_workers > 1:
        first += ["--learner-workers", str(args.learner_workers)]
    if args.model is not None:
        first = [a for a in first if a not in ("--lora-config", '{"lora_rank": 4, "lora_alpha": 8}')]
    return first


def await_after_kill(proc: subprocess.Popen, run_dir: Path, kind: str, hang_s: float, say: Any) -> int:
    """Wait for the run's answer to a killed actor; 1 if it hung (then its processes are killed), else 0."""
    hangs = 0
    if kind == "inference":  # Ray restarts it: the run must say so (or end) within --hang-s
        seen = restarts_seen(run_dir)
        deadline = time.monotonic() + hang_s
        while proc.poll() is None and restarts_seen(run_dir) == seen:
            if time.monotonic() > deadline:
                hangs = 1
                say(f"HANG: no restart reported within {hang_s:.0f} s of killing {kind}")
                kill_group(proc)
                break
            time.sleep(0.2)
        else:
            if proc.poll() is None:
                say("the run reported the inference actor's restart")
    else:  # the others stop the run at once; silence is a hang
        try:
            proc.wait(timeout=hang_s)
        except subprocess.TimeoutExpired:
            hangs = 1
            say(f"HANG: the run did not stop within {hang_s:.0f} s of killing {kind}")
            kill_group(proc)
    return hangs


def print_summary(
    args: argparse.Namespace,
    killed: collections.Counter[str],
    resumes: int,
    stops_without_line: int,
    hangs: int,
    driver_kills: list[tuple[float, int, int]],
    run_dir: Path,
    started: float,
) -> None:
    """The table of what was killed, what the run did about it, and the finished run's checks."""
    rows = [
        ("model", args.model or "tiny random-weight model"),
        ("learning steps asked", str(args.steps)),
        ("games per group, learner workers", f"{args.repeat}, {args.learner_workers}"),
        (
            "actors killed",
            f"{sum(killed.values())} ({', '.join(f'{k} {v}' for k, v in sorted(killed.items()))})",
        ),
        ("resumes", str(resumes)),
        ("stops without the resume line", str(stops_without_line)),
        ("hangs", str(hangs)),
        *(
            [
                ("driver killed: run lock free after", ", ".join(f"{k[0]:.2f} s" for k in driver_kills)),
                ("driver killed: processes left after 10 s", ", ".join(str(k[1]) for k in driver_kills)),
                (
                    "driver killed: files written after the lock was free",
                    ", ".join(str(k[2]) for k in driver_kills),
                ),
            ]
            if driver_kills
            else []
        ),
        *check_run(run_dir, args.steps).items(),
        ("wall time", f"{time.monotonic() - started:.0f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def main() -> None:
    args, parser = parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(KINDS)}")
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="unstable-faults-"))
    model = args.model
    if model is None:
        from unstable_core.testing import make_tiny_model

        model = str(make_tiny_model(tmp / "tiny-model"))
    runs_dir = Path(args.runs_dir or tmp / "runs")
    run_dir = (runs_dir / "faults").resolve()
    first = first_args(args, model, runs_dir)
    order: list[str] = []
    killed: collections.Counter[str] = collections.Counter()
    resumes = hangs = stops_without_line = 0
    driver_kills: list[tuple[float, int, int]] = []
    started = time.monotonic()
    say = lambda text: print(f"{time.monotonic() - started:6.0f} s  {text}", flush=True)  # noqa: E731
    proc = launch(first)
    while True:
        # each (re)started run first makes progress (a new checkpoint), then is killed 0-T s later; a run
        # that makes no progress for --hang-s seconds (no new checkpoint, no exit) hangs
        known, progress_at, next_kill = checkpoints(run_dir), time.monotonic(), None
        while proc.poll() is None:
            now = time.monotonic()
            if checkpoints(run_dir) > known:
                known, progress_at = checkpoints(run_dir), now
                if next_kill is None:
                    next_kill = now + args.every * rng.uniform(0.0, 1.0)
            if sum(killed.values()) < args.kills and next_kill is not None and now >= next_kill:
                break
            if now - progress_at > args.hang_s:
                hangs += 1
                say(f"HANG: no progress for {args.hang_s:.0f} s")
                kill_group(proc)
                break
            time.sleep(0.2)
        if proc.poll() is None:  # time for a kill
            if not order:
                order = rng.sample(kinds, len(kinds))
            kind = order.pop()
            if kind == "driver":
                driver_kills.append(kill_driver(proc, run_dir))
                killed[kind] += 1
                lock_s, left, written = driver_kills[-1]
                say(f"killed driver: lock free after {lock_s:.2f} s, {left} processes left after 10 s, "
                    f"{written} files written after the lock was free")  # fmt: skip
                continue
            pids = actor_pids(proc).get(kind)
            if not pids:
                say(f"no {kind} actor to kill")
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(pids), signal.SIGKILL)
            killed[kind] += 1
            say(f"killed {kind}")
            hangs += await_after_kill(proc, run_dir, kind, args.hang_s, say)
            continue
        err = proc.stderr.read() if proc.stderr else ""
        if proc.returncode == 0:
            break
        last = err.strip().splitlines()[-1] if err.strip() else ""
        say(f"run stopped ({proc.returncode}): {last[:200]}")
        if proc.returncode == 2 and "the run is complete" in last:  # killed after its last checkpoint
            break
        if "--resume" not in last and proc.returncode != -9:
            stops_without_line += 1
        if resumes >= args.kills + 5:
            say("giving up: too many resumes")
            break
        resumes += 1
        proc = launch(["--resume", str(run_dir)])
    print_summary(args, killed, resumes, stops_without_line, hangs, driver_kills, run_dir, started)


if __name__ == "__main__":
    main()
