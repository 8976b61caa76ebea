"""Where `unstable eval` writes: its output folder, made (never over an earlier evaluation), and removed
again when nothing was played."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError
from unstable_core.io import make_folder
from unstable_core.league.league import league_path


def default_out_dir(models: list[Any], now: float | None = None) -> Path:
    """`<run_dir>/eval/<timestamp>` for the first model that comes from a run, else `<runs_dir>/eval-<timestamp>`
    in the default runs folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for t in models:
        if t.run_dir:
            return Path(t.run_dir) / "eval" / stamp
    return Path(attrs.fields(RunConfig).runs_dir.default) / f"eval-{stamp}"


def prepare_out_dir(out: Path) -> tuple[Path, list[Path]]:
    """The output folder, made, and the folders made for it (deepest first); an existing evaluation is
    never written over."""
    out = out.expanduser().resolve()
    if (out / "summary.json").exists() or (out / "games").exists():
        raise ConfigError(f"{out} already holds an evaluation; give another --out")
    made = [p for p in (out, *out.parents) if not p.exists()]
    make_folder(out, "--out")
    return out, made


def discard_unplayed(out: Path, made: list[Path]) -> bool:
    """After an evaluation that stopped before recording any game: remove what it wrote (the league, an
    empty games folder) and the folders made for it, so that no empty `runs/eval-*` stays behind. True
    when nothing was left."""
    games = out / "games" / "games.jsonl"
    if games.is_file() and games.stat().st_size:
        return False
    for path in (games, league_path(out)):
        path.unlink(missing_ok=True)
    for folder in (out / "games", *made):
        with contextlib.suppress(OSError):  # not empty (someone else's files): kept
            folder.rmdir()
    return True
