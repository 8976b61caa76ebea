"""Continuing a run from its last complete checkpoint that loads (`unstable run --resume RUN_DIR`).

Every checkpoint folder holds, beside the learner's files, `run_state.json`: the league as it was
just before the checkpoint was registered, the reward transforms' state, each collector's sampler state
and RNG streams, and the learner metrics of that step. The folder is written atomically, so a checkpoint is
complete with all of it or absent.

Log files are appended, never rewritten. Learner metrics are logged only after their checkpoint is
complete, so metrics.jsonl never holds a step beyond the last complete checkpoint; a step whose line a crash
cut off is appended from its checkpoint's run_state.json on resume. Games played after the last checkpoint
stay in games.jsonl (they were played) but not in the restored ratings; the resumed collectors number new
games after every game recorded, so no game index repeats.

A checkpoint is read whole before the run resumes from it (`checkpoint_problem`); newer ones that do not
load are set aside as `step-<k>.unreadable`, and the logs are rolled back to the older step
(`rollback.py`): the only rewrite of a log, which moves its later lines aside.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import RunConfig, config_from_dict, merge_layers
from unstable_core.errors import ConfigError
from unstable_core.io import append_jsonl, read_jsonl
from unstable_core.learners.checkpoint import CHECKPOINT_FILES, OPTIMIZER_FILE, checkpoint_problem
from unstable_core.runtime.recovery.rollback import roll_back_logs
from unstable_core.runtime.run_dir import (
    CONFIG,
    GAMES,
    LEARNER_STATE,
    METRICS,
    RUN_STATE,
    UNREADABLE,
    checkpoint_folder,
    checkpoint_steps,
)

RESUME_HINT = "continue it with `unstable run --resume {run_dir}`"

# options that may differ on resume: how the run is executed, not what it learns
RESUMABLE_OPTIONS = frozenset(
    {
        "learning_steps",
        "num_train_workers",
        "num_eval_workers",
        "num_collectors",
        "num_inference_actors",
        "learner_workers",
        "max_batch_size",
        "ray_address",
        "device",
        "game_timeout_s",
        "trackers",
        "wandb_project",
        "failure_window",
        "max_failure_rate",
        "max_nonfinite_updates",
    }
)


@attrs.define
class Skipped:
    """A checkpoint newer than the resume point that does not load: why (naming the file), and the
    folder it was set aside as (`checkpoints/step-<k>.unreadable`)."""

    step: int
    problem: str
    kept_as: str | None = None


@attrs.define
class ResumePoint:
    """The last complete checkpoint of a run and the run's state saved with it."""

    run_dir: Path
    step: int
    checkpoint: Path
    state: dict[str, Any]
    skipped: list[Skipped] = attrs.field(factory=list)  # newer checkpoints that do not load
    steps: list[int] = attrs.field(factory=list)  # the complete checkpoints up to `step`, ascending

    def lines(self) -> list[str]:
        """What a resume from this checkpoint tells the user: an older checkpoint than the last, or no
        optimizer state kept with it."""
        return [line for line in (self.fallback_line(), self.optimizer_line()) if line is not None]

    def optimizer_line(self) -> str | None:
        """The one line that says the checkpoint resumed from kept no optimizer state, or None."""
        if (self.checkpoint / OPTIMIZER_FILE).is_file():
            return None
        return (
            f"checkpoint step {self.step} kept no optimizer state (only the newest --keep-optimizer-states "
            "do): the optimizer starts fresh, its moment estimates rebuilt over the next updates"
        )

    def fallback_line(self) -> str | None:
        """The one line that says the run resumes from an older checkpoint than its last, or None."""
        if not self.skipped:
            return None
        newest = self.skipped[0]
        others = [s.step for s in self.skipped[1:]]
        return (
            f"checkpoint step {newest.step} does not load ({newest.problem})"
            + (
                f", nor {'steps' if len(others) > 1 else 'step'} {', '.join(map(str, others))}"
                if others
                else ""
            )
            + f": resuming from step {self.step}, the newest that does; set aside as "
            + ", ".join(f"checkpoints/{s.kept_as}" for s in self.skipped)
        )

    @property
    def league(self) -> dict[str, Any]:
        """The league saved with the checkpoint (under "registry" in checkpoints written before the rename)."""
        return self.state["league"] if "league" in self.state else self.state["registry"]

    @property
    def rewards(self) -> dict[str, Any]:
        return self.state.get("rewards", {})

    def collector_state(self, shard: int) -> dict[str, Any] | None:
        states = self.state.get("collectors", [])
        return states[shard] if shard < len(states) else None


@attrs.frozen
class SavedRun:
    """A run directory opened by `--resume`: its own config with the allowed overrides and what they
    changed, read once before anything starts; its checkpoints are read once, under the run's lock
    (`resume_point`). `run_dir` is the folder as given (the error lines name it so)."""

    run_dir: Path
    cfg: RunConfig
    changed: dict[str, Any]

    @classmethod
    def read(cls, run_dir: str | os.PathLike, overrides: dict[str, Any]) -> SavedRun:
        """The run's own config.toml with the allowed `overrides`, and what changed {key: [old, new]}. An
        override that changes what the run learns (model, learner, envs, algorithm...) is refused."""
        run_dir = Path(run_dir)
        path = run_dir / CONFIG
        if not run_dir.is_dir():
            what = "is a file, not a folder" if run_dir.exists() else "does not exist"
            raise ConfigError(f"--resume {run_dir} {what}: pass the folder of a run (runs/<run-name>)")
        if not path.is_file():
            raise ConfigError(
                f"--resume {run_dir}: no config.toml there; pass the folder of a run (runs/<run-name>)"
            )
        from unstable_core.config import load_config

        base = load_config(path).to_dict()
        given = config_from_dict(merge_layers(base, overrides)).to_dict()
        changed = {k: [base.get(k), v] for k, v in given.items() if v != base.get(k)}
        changed.pop("run_name", None)  # the folder is the run, wherever it now lies
        changed.pop("runs_dir", None)
        refused = sorted(k for k in changed if k not in RESUMABLE_OPTIONS)
        if refused:
            key = refused[0]
            raise ConfigError(
                f"--resume {run_dir}: {key} is {base.get(key)!r} in the run, {given[key]!r} given; a resumed "
                f"run keeps what it learns (only {', '.join(sorted(RESUMABLE_OPTIONS))} may change): drop "
                f"{cli_flag(key)} or start a new run"
            )
        cfg = config_from_dict(merge_layers(base, {k: v[1] for k, v in changed.items()}))
        return cls(run_dir, cfg, changed)

    def resume_point(self, learner: type | None = None) -> ResumePoint | None:
        """The newest complete checkpoint whose files load, or None when the run has none yet (it restarts
        at 0): the one read of the run's checkpoints. A run that already reached its learning_steps is
        refused, and so is a checkpoint that another `learner` class wrote (before Ray, not in the learner
        actor); newer checkpoints that do not load are set aside (`ResumePoint.skipped`); none loading is
        a ConfigError naming the file. Call it holding the run's lock: it writes."""
        folder = self.run_dir.resolve()
        steps = checkpoint_steps(folder)
        step, skipped = newest_loadable(folder, steps, self.run_dir)
        if step >= self.cfg.learning_steps:  # a last checkpoint that does not load is not done
            raise ConfigError(
                f"--resume {self.run_dir}: the run is complete (learner step {step} of "
                f"{self.cfg.learning_steps}): to train it further, give more steps, e.g. `unstable run "
                f"--resume {self.run_dir} --learning-steps {2 * step}`"
            )
        if not step:
            return None
        checkpoint = checkpoint_folder(folder, step)
        if learner is not None:
            written = json.loads((checkpoint / LEARNER_STATE).read_text()).get("learner")
            if written != learner.__name__:
                raise ConfigError(
                    f"--resume {self.run_dir}: checkpoint {checkpoint} was written by {written}, not by the "
                    f"run's learner {self.cfg.learner!r} ({learner.__name__}); restore the run's own "
                    "checkpoint, or start a new run"
                )
        for s in skipped:
            s.kept_as = set_aside(checkpoint_folder(folder, s.step))
        state = json.loads((checkpoint / RUN_STATE).read_text())
        return ResumePoint(folder, step, checkpoint, state, skipped, [k for k in steps if k <= step])


def newest_loadable(run_dir: Path, steps: list[int], given: Path) -> tuple[int, list[Skipped]]:
    """The newest of the complete checkpoints `steps` whose files all load (`checkpoint_problem`), 0 when
    there is none, and the newer ones that do not load, newest first. Every checkpoint failing is a
    ConfigError naming the newest's file (and the run as `--resume` was `given` it)."""
    skipped: list[Skipped] = []
    for step in reversed(steps):
        problem = checkpoint_problem(checkpoint_folder(run_dir, step), (*CHECKPOINT_FILES, RUN_STATE))
        if problem is None:
            return step, skipped
        skipped.append(Skipped(step, problem))
    if skipped:
        older = len(skipped) - 1
        others = {0: "", 1: " (nor does the older one)"}.get(older, f" (nor do the {older} older ones)")
        raise ConfigError(
            f"--resume {given}: no checkpoint of the run loads: {skipped[0].problem}{others}; restore that "
            "file from a copy, or start a new run"
        )
    return 0, []


def set_aside(folder: Path) -> str:
    """Rename a checkpoint folder that does not load to `<name>.unreadable` (a free name): no longer a
    checkpoint, but kept for a look. Returns its new name."""
    target = folder.with_name(folder.name + UNREADABLE)
    n = 1
    while target.exists():
        n += 1
        target = folder.with_name(f"{folder.name}{UNREADABLE}-{n}")
    os.replace(folder, target)
    return target.name


def cli_flag(key: str) -> str:
    """The command-line option of a RunConfig key (`trackers` -> `--tracker`, `batch_size` -> `--batch-size`)."""
    field = attrs.fields_dict(RunConfig).get(key)
    return (field.metadata.get("cli") if field is not None else None) or "--" + key.replace("_", "-")


def _end_partial_line(path: Path) -> bool:
    """Close a last line that a crash cut short, so that appended lines stay lines; True if it did."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return False
    with open(path, "a") as f:
        f.write("\n")
    return True


def max_game_index(run_dir: Path) -> int:
    """The largest game index in games.jsonl (-1 when none)."""
    idx = [r["info"]["game_idx"] for r in read_jsonl(run_dir / GAMES) if isinstance(r, dict) and "info" in r]
    return max(idx, default=-1)


def prepare_logs(point: ResumePoint | None, run_dir: Path, changed: dict[str, Any]) -> dict[str, Any]:
    """Make the run's logs ready to be appended to: a line cut short by the crash is closed, a resume from
    an older checkpoint than the last (`point.skipped`) rolls the logs back to it (`roll_back_logs`),
    learner steps up to the checkpoint missing from metrics.jsonl are appended from their checkpoints.
    Returns the resume record (for `record_resume`)."""
    metrics_path = run_dir / METRICS
    games_path = run_dir / GAMES
    cut = [str(p.relative_to(run_dir)) for p in (metrics_path, games_path) if _end_partial_line(p)]
    step = point.step if point is not None else 0
    next_game = max_game_index(run_dir) + 1  # after every game played, those rolled back included
    rolled_back = roll_back_logs(run_dir, step) if point is not None and point.skipped else {}
    logged = {r["step"] for r in read_jsonl(metrics_path) if is_learner_record(r)}
    restored = []
    for k in point.steps if point is not None else []:
        if k in logged:
            continue
        state = json.loads((checkpoint_folder(run_dir, k) / RUN_STATE).read_text())
        if state.get("metrics"):
            restored.append({**state["metrics"], "step": k})
    append_jsonl(metrics_path, restored)
    record = {
        "event": "resume",
        "time": time.time(),
        "resumed_from_step": step,
        "checkpoint": str(point.checkpoint) if point is not None else None,
        "changed": changed,
        "metrics_restored_steps": [r["step"] for r in restored],
        "cut_lines_closed": cut,
        "next_game_index": next_game,
    }
    if point is not None and point.skipped:
        record["skipped_checkpoints"] = [attrs.asdict(s) for s in point.skipped]
        record["rolled_back_lines"] = rolled_back
    return record


def is_learner_record(record: dict[str, Any]) -> bool:
    """A learner step's line of metrics.jsonl (one per update, with `learner/...` keys); the others are
    scheduled evaluations (`eval/...` at a step) and events (resume, actor_died, stopped: no step)."""
    return "step" in record and any(k.startswith("learner/") for k in record)


def record_resume(run_dir: Path, record: dict[str, Any]) -> None:
    """The resume as a line of metrics.jsonl (an event: no `step`, so learner steps never repeat)."""
    append_jsonl(Path(run_dir) / METRICS, [record])


def record_event(run_dir: Path, event: str, **fields: Any) -> None:
    """An event of the run (an actor died, the run stopped) as a line of metrics.jsonl, without a step."""
    append_jsonl(Path(run_dir) / METRICS, [{"event": event, "time": time.time(), **fields}])
