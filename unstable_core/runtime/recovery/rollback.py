"""A resume from an older checkpoint than the run's last (the newer ones do not load) rolls the run's logs
back to it: the lines of the policy versions it drops move out of `metrics.jsonl` and `games/games.jsonl`
into `*.rolled-back.jsonl` beside them, so that the logs hold no step beyond the resume point and a
version the resumed run trains again is never two policies. Nothing is deleted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unstable_core.io import atomic_write_text, fsync_file
from unstable_core.runtime.run_dir import GAMES, METRICS

CKPT = "ckpt-"


def rolled_back_path(path: Path) -> Path:
    """Where the lines moved out of `path` go: `metrics.jsonl` -> `metrics.rolled-back.jsonl`."""
    return path.with_name(path.name.removesuffix(".jsonl") + ".rolled-back.jsonl")


def beyond_metrics(record: Any, step: int) -> bool:
    """A metrics.jsonl line of a step after `step`: a learner update's or a scheduled evaluation's (events
    have no step)."""
    return isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step


def beyond_games(record: Any, step: int) -> bool:
    """A games.jsonl line of a game that a checkpoint after `step` played (`ckpt-<k>`, k > step)."""
    models = record.get("info", {}).get("models", {}) if isinstance(record, dict) else {}
    versions = [uid[len(CKPT) :] for uid in models.values() if isinstance(uid, str) and uid.startswith(CKPT)]
    return any(v.isdigit() and int(v) > step for v in versions)


def move_lines(path: Path, beyond: Any, step: int) -> int:
    """Move the lines of `path` for which `beyond(record, step)` holds to its rolled-back file (appended,
    flushed), then rewrite `path` without them (atomically); a line that is not JSON stays. Returns how
    many moved; `path` is not touched when none does."""
    if not path.is_file():
        return 0
    kept, moved = [], []
    for line in path.read_text().splitlines(keepends=True):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        (moved if record is not None and beyond(record, step) else kept).append(line)
    if not moved:
        return 0
    out = rolled_back_path(path)
    with open(out, "a") as f:
        f.writelines(line if line.endswith("\n") else line + "\n" for line in moved)
    fsync_file(out)
    atomic_write_text(path, "".join(kept))
    return len(moved)


def roll_back_logs(run_dir: Path, step: int) -> dict[str, int]:
    """Move the metrics of steps after `step` and the games of checkpoints after it out of the run's logs;
    returns {file: lines moved} for those that had any."""
    moved = {
        METRICS: move_lines(run_dir / METRICS, beyond_metrics, step),
        str(GAMES): move_lines(run_dir / GAMES, beyond_games, step),
    }
    return {name: n for name, n in moved.items() if n}
