"""`unstable export RUN_DIR`: a run's trajectories as JSON lines, for supervised fine-tuning.

`--format chat` (default): one line per turn, `{"messages": [system/user turns of the prompt, {"role":
"assistant", "content": completion}], "metadata": {...}}`; `--format raw`: one line per step with token ids,
log-probabilities and rewards. By default only the seats played by the run's own checkpoints are exported:
a fixed opponent's turns become training targets only when `--model` names it. The records themselves are
`unstable_core.report.export`.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.report.checkpoint_rates import CKPT_PREFIX
from unstable_core.report.export import OUTCOMES, ExportFilter, export_run


@click.command(name="export")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["chat", "raw"]),
    default="chat",
    show_default=True,
    help="chat: messages for supervised fine-tuning; raw: steps with token ids, logprobs, rewards.",
)
@click.option(
    "--outcome",
    multiple=True,
    type=click.Choice(OUTCOMES),
    help="Only seats that won/drew/lost (repeatable).",
)
@click.option("--env", "envs", multiple=True, help="Only games of this env id (repeatable).")
@click.option(
    "--checkpoint",
    "checkpoints",
    multiple=True,
    help="Only turns of this checkpoint: 3 or ckpt-3 (repeatable).",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(["train", "eval"]),
    help="Training or evaluation games (repeatable).",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    help="Seats of this player (a model uid such as ckpt-3 or base; 'all' for every seat). "
    "Default: the run's own checkpoints only.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File to write [default: stdout].",
)
def export_command(run_dir: Path, fmt: str, outcome, envs, checkpoints, kinds, models, out: Path | None) -> None:  # fmt: skip
    """The run's trajectories as JSON lines: chat messages for fine-tuning, or raw steps."""
    flt = ExportFilter(
        outcomes=tuple(outcome),
        envs=tuple(envs),
        checkpoints=tuple(checkpoint_uid(c) for c in checkpoints),
        kinds=tuple(kinds),
        models=tuple(models),
    )
    tmp = open_output(out)  # a file that cannot be written is refused before the run is read
    try:
        count = _export(run_dir, flt, fmt, tmp)
        if tmp is not None:
            tmp.replace(out)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    click.echo(f"exported {count} turns ({fmt})" + (f" to {out}" if out else ""), err=True)


def _export(run_dir: Path, flt: ExportFilter, fmt: str, tmp: Path | None) -> int:
    """Write the records to `tmp` (stdout when None), warnings to stderr; returns how many were written."""
    with open(tmp, "w") if tmp is not None else contextlib.nullcontext(sys.stdout) as f:
        return export_run(run_dir, flt, fmt, f, lambda line: click.echo(line, err=True))


def checkpoint_uid(value: str) -> str:
    """`3`, `step-3` or `ckpt-3` -> `ckpt-3`."""
    tail = value.rsplit("-", 1)[-1]
    if not tail.isdigit():
        raise UnstableError(f"--checkpoint {value!r}: expected a learner step such as 3 or ckpt-3")
    return f"{CKPT_PREFIX}{int(tail)}"


def open_output(out: Path | None) -> Path | None:
    """The temporary file `--out` is written to (renamed to `out` once whole), made now: a folder that
    cannot be created or written is one line (exit 2) before anything is read. None for stdout."""
    if out is None:
        return None
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.touch()
    except OSError as exc:
        where = exc.filename or out.parent
        raise ConfigError(
            f"--out {str(out)!r} cannot be written ({where}: {exc.strerror}): give a file in a folder you can write to"
        ) from None
    return tmp
