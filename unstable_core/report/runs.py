"""The runs of a folder and where each stands (`unstable runs`): state, steps, wall time, verdict and disk
use, read from each run's own files (config.toml, metrics.jsonl, summary.json and its lock)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import attrs

from unstable_core.run_lock import LOCK_NAME, lock_is_free


@attrs.frozen
class RunRow:
    """One run directory as `unstable runs` shows it."""

    name: str
    state: str  # running, finished, stopped (why)
    steps: int
    wall_s: float | None
    verdict: str | None
    disk_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def is_run_dir(path: Path) -> bool:
    """A run directory holds the config.toml every run writes first."""
    return path.is_dir() and (path / "config.toml").is_file()


def disk_bytes(path: Path) -> int:
    """Bytes of every regular file under `path` (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed while we walk (a running run rotates its files)
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:  # a line cut by a kill
            continue
    return records


def _running(run_dir: Path) -> bool:
    return (run_dir / LOCK_NAME).exists() and not lock_is_free(run_dir)


def _learning_steps(run_dir: Path) -> int | None:
    """The run's planned learner steps from its config.toml (None: unreadable, or a run that plays only)."""
    from unstable_core.config.load import tomllib  # tomli before Python 3.11

    with contextlib.suppress(OSError, ValueError):
        planned = tomllib.loads((run_dir / "config.toml").read_text()).get("learning_steps")
        return planned if isinstance(planned, int) and not isinstance(planned, bool) else None
    return None


def run_row(run_dir: Path) -> RunRow:
    """Where the run in `run_dir` stands."""
    records = _metrics(run_dir)
    steps = max(
        (r["step"] for r in records if "step" in r and any(k.startswith("learner/") for k in r)), default=0
    )
    times = [r["time"] for r in records if isinstance(r.get("time"), (int, float))]
    summary: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        summary = json.loads((run_dir / "summary.json").read_text())
    events = [r for r in records if "event" in r]
    resumed = [
        e["time"] for e in events if e["event"] == "resume" and isinstance(e.get("time"), (int, float))
    ]
    if summary and resumed and max(resumed) > (run_dir / "summary.json").stat().st_mtime:
        summary = {}  # the summary of a leg before the last --resume, which then ended without one
    if _running(run_dir):
        state = "running"
    elif summary and not summary.get("aborted") and not summary.get("stop_reason"):
        planned = _learning_steps(run_dir)
        short = planned is not None and steps < planned  # stopped by a signal or Ctrl-C: a clean stop
        state = f"stopped (at step {steps} of {planned})" if short else "finished"
    else:
        why = summary.get("stop_reason") or next(
            (
                f"{e['event']}: {e.get('reason') or e.get('actor') or ''}".rstrip(": ")
                for e in reversed(events)
                if e["event"] != "stopped" and e["event"] != "resume"
            ),
            None,
        )
        state = f"stopped ({why or ('aborted' if summary else 'killed: no summary')})"
    wall = summary.get("elapsed_s")
    if wall is None and len(times) >= 2:
        wall = max(times) - min(times)
    learning = summary.get("learning") or {}
    return RunRow(run_dir.name, state, int(steps), wall, learning.get("sentence"), disk_bytes(run_dir))


def list_runs(folder: Path) -> list[RunRow]:
    """Every run directory directly inside `folder`, by name."""
    return [run_row(p) for p in sorted(folder.iterdir()) if is_run_dir(p)]
