"""The run directory's layout: the names of its files and checkpoint folders, and which checkpoints it holds.
The actors write it, recovery reads it back; both take the names from here."""

from __future__ import annotations

import re
from pathlib import Path

from unstable_core.learners.checkpoint import recover_folder

CONFIG = "config.toml"
METRICS = "metrics.jsonl"
GAMES = Path("games") / "games.jsonl"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
RUN_STATE = "run_state.json"  # in each checkpoint folder: what a resumed run needs beside the learner's files
LEARNER_STATE = "learner_state.json"
UNREADABLE = ".unreadable"  # a checkpoint folder that does not load, set aside by a resume
_STEP_DIR = re.compile(r"^step-(\d+)$")
_STEP_DIR_OR_OLD = re.compile(r"^step-(\d+)(\.old)?$")


def checkpoint_folder(run_dir: Path, step: int) -> Path:
    """`run_dir/checkpoints/step-<step>`."""
    return Path(run_dir) / CHECKPOINTS / f"step-{step}"


def checkpoint_steps(run_dir: Path, recover: bool = True) -> list[int]:
    """Steps of the complete checkpoint folders (a `.tmp` left by a crash is not one), ascending. A
    `step-<k>.old` left by a crash mid-replace is put back (`recover`), or only counted (without it: a
    process that does not hold the run's lock writes nothing)."""
    folder = Path(run_dir) / CHECKPOINTS
    if not folder.is_dir():
        return []
    if recover:
        for old in folder.glob("step-*.old"):
            recover_folder(old.with_name(old.name[: -len(".old")]))
    steps = set()
    for p in folder.iterdir():
        m = (_STEP_DIR if recover else _STEP_DIR_OR_OLD).match(p.name)
        if m and (p / LEARNER_STATE).is_file() and (p / RUN_STATE).is_file():
            steps.add(int(m.group(1)))
    return sorted(steps)
