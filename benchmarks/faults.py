"""Fault injection: kill a random actor of a run, resume it whenever it stops, check the run directory.

A kill falls at a random moment 0-T s after each (re)start's first new checkpoint, so that every start
makes progress and kills land during collection, updates and checkpoint writes alike.

    python3 benchmarks/faults.py [--steps 6] [--every 20] [--kills 3] [--model smollm2-135m]

Without --model the run uses a tiny random-weight model (seconds per step on a CPU); `--model smollm2-135m`
uses the embedded default. Each kill is a SIGKILL of one Ray actor's process, chosen at random among the
collector, buffer, model registry, tracker, learner and inference actors. An inference actor is restarted by
Ray (its games replayed); any other death stops the run with the line `unstable run --resume RUN_DIR`, and the
benchmark then resumes it. A run that neither ends nor stops within --hang-s seconds of a kill is a hang.

At the end it prints: actors killed (by kind), inference restarts, resumes, hangs, games duplicated (a game
index recorded twice in games.jsonl), games lost (a games.jsonl line that does not parse: a game cut by a
kill), learner steps duplicated or missing in metrics.jsonl, checkpoints intact (every step-1..N folder
loadable), and whether the final step equals the steps asked for.
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

import psutil

ACTORS = ["Collector", "StepBuffer", "RegistryHost", "_TrackerActor", "LearnerHost", "InferenceActor"]
SMALL = [
    "--batch-size", "4", "--mini-batch-size", "2", "--max-generation-len", "8", "--num-train-workers", "4",
    "--device", "cpu", "--lora-config", '{"lora_rank": 4, "lora_alpha": 8}',
]  # fmt: skip


def actor_pids(proc: subprocess.Popen) -> dict[str, list[int]]:
    """Ray worker processes of the run by actor class (their title is `ray::<Class>...`)."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process(proc.pid).children(recursive=True):
            try:
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                continue
            for name in ACTORS:
                if f"ray::{name}" in cmd:
                    out[name].append(p.pid)
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
    logged = [r["step"] for r in records if any(k.startswith("learner/") for k in r)]
    intact = 0
    for k in range(1, steps + 1):
        folder = run_dir / "checkpoints" / f"step-{k}"
        try:
            assert json.loads((folder / "learner_state.json").read_text())["step"] == k
            json.loads((folder / "run_state.json").read_text())
            for name in ("adapter_model.safetensors", "optimizer.safetensors"):
                with safe_open(str(folder / name), "pt") as f:
                    list(f.keys())
            intact += 1
        except Exception:
            pass
    registry = json.loads((run_dir / "registry.json").read_text())
    return {
        "games recorded": len(games),
        "games duplicated": len(idx) - len(set(idx)),
        "games lost (cut lines)": broken,
        "learner steps duplicated": len(logged) - len(set(logged)),
        "learner steps missing": len(set(range(1, steps + 1)) - set(logged)),
        "checkpoints intact": f"{intact} / {steps}",
        "final step = asked": registry.get("current") == f"ckpt-{steps}" and intact == steps,
        "events": collections.Counter(r["event"] for r in records if "event" in r),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="default: a tiny random-weight model")
    parser.add_argument("--steps", type=int, default=6, help="learning steps of the run")
    parser.add_argument(
        "--every", type=float, default=20.0, help="a kill falls 0-T s after a start's first checkpoint"
    )
    parser.add_argument("--kills", type=int, default=3, help="actors to kill at most")
    parser.add_argument(
        "--hang-s", type=float, default=240.0, help="a run silent this long after a kill hangs"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs-dir", default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="unstable-faults-"))
    model = args.model
    if model is None:
        from unstable_core.testing import make_tiny_model

        model = str(make_tiny_model(tmp / "tiny-model"))
    runs_dir = Path(args.runs_dir or tmp / "runs")
    run_dir = (runs_dir / "faults").resolve()
    first = ["--model", model, "--runs-dir", str(runs_dir), "--run-name", "faults", "--learning-steps"]
    first += [str(args.steps), *SMALL]
    if args.model is not None:
        first = [a for a in first if a not in ("--lora-config", '{"lora_rank": 4, "lora_alpha": 8}')]
    killed: collections.Counter[str] = collections.Counter()
    resumes = hangs = 0
    started = time.monotonic()
    proc = launch(first)
    while True:
        # each (re)started run first makes progress (a new checkpoint), then is killed T seconds on average later
        known = len(list((run_dir / "checkpoints").glob("step-*[0-9]")))
        next_kill = None
        while proc.poll() is None:
            if next_kill is None and len(list((run_dir / "checkpoints").glob("step-*[0-9]"))) > known:
                next_kill = time.monotonic() + args.every * rng.uniform(0.0, 1.0)
            if sum(killed.values()) < args.kills and next_kill is not None and time.monotonic() >= next_kill:
                break
            time.sleep(0.2)
        if proc.poll() is None:  # time for a kill
            pids = actor_pids(proc)
            choices = [name for name in ACTORS if pids.get(name)]
            if choices:
                name = rng.choice(choices)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rng.choice(pids[name]), signal.SIGKILL)
                killed[name] += 1
                print(f"{time.monotonic() - started:6.0f} s  killed {name}", flush=True)
                try:
                    proc.wait(timeout=args.hang_s if name != "InferenceActor" else 1)
                except subprocess.TimeoutExpired:
                    if name != "InferenceActor":  # the others stop the run; silence is a hang
                        hangs += 1
                        print(f"{time.monotonic() - started:6.0f} s  HANG after killing {name}", flush=True)
                        kill_group(proc)
            continue
        err = proc.stderr.read() if proc.stderr else ""
        if proc.returncode == 0:
            break
        last = err.strip().splitlines()[-1] if err.strip() else ""
        print(
            f"{time.monotonic() - started:6.0f} s  run stopped ({proc.returncode}): {last[:160]}", flush=True
        )
        if "--resume" not in last and proc.returncode != -9:
            print("the run stopped without the resume line", flush=True)
        resumes += 1
        proc = launch(["--resume", str(run_dir)])
    result = check_run(run_dir, args.steps)
    restarts = result.pop("events")
    rows = [
        ("model", args.model or "tiny random-weight model"),
        ("learning steps asked", str(args.steps)),
        (
            "actors killed",
            f"{sum(killed.values())} ({', '.join(f'{k} {v}' for k, v in sorted(killed.items()))})",
        ),
        ("actor deaths recorded (metrics.jsonl)", str(restarts.get("actor_died", 0))),
        ("inference actors restarted by Ray", str(killed.get("InferenceActor", 0))),
        ("resumes", str(resumes)),
        ("hangs", str(hangs)),
        *((k, str(v)) for k, v in result.items()),
        ("wall time", f"{time.monotonic() - started:.0f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
