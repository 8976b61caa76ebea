"""Playing an evaluation's games, and where they go: its output folder, made (never over an earlier
evaluation) and removed again when nothing was played; the games themselves are played by a run that does
not learn, whose actors `build_eval_graph` starts (the launch path's builder of an evaluation: engines,
collectors of the fixed schedule, league, recorder), which writes each to `<out>/games/games.jsonl`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError
from unstable_core.io import make_folder, read_jsonl
from unstable_core.league.league import league_path
from unstable_core.runtime.launch.plan import RunPlan
from unstable_core.types import GameResult, game_result_from_dict


def open_out_dir(out: Path | None, models: list[Any]) -> tuple[Path, list[Path]]:
    """The output folder (`out`, else `default_out_dir`), made, and the folders made for it (deepest
    first); an existing evaluation is never written over."""
    out = (out or default_out_dir(models)).expanduser().resolve()
    if (out / "summary.json").exists() or (out / "games").exists():
        raise ConfigError(f"{out} already holds an evaluation; give another --out")
    made = [p for p in (out, *out.parents) if not p.exists()]
    make_folder(out, "--out")
    return out, made


def default_out_dir(models: list[Any], now: float | None = None) -> Path:
    """`<run_dir>/eval/<timestamp>` for the first model that comes from a run, else `<runs_dir>/eval-<timestamp>`
    in the default runs folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for t in models:
        if t.run_dir:
            return Path(t.run_dir) / "eval" / stamp
    return Path(attrs.fields(RunConfig).runs_dir.default) / f"eval-{stamp}"


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


def play_games(
    plan: RunPlan,
    out_dir: Path,
    concurrency: int,
    on_progress: Callable[[dict[str, int]], None] | None = None,
    on_event: Callable[[str], None] | None = None,
) -> list[GameResult]:
    """Play every game of the plan's schedule, `concurrency` at once, on the actors `build_eval_graph` starts;
    returns their results (failed ones included), as written to `<out_dir>/games/games.jsonl`.
    The first game of each distinct error is passed to `on_event` as it is recorded."""
    import ray

    from unstable_core.runtime.actors.recorder import ErrorLines, wait_for_records
    from unstable_core.runtime.launch.build import build_eval_graph, start_collection
    from unstable_core.runtime.launch.cluster import raise_interrupt, start_ray, stop_ray

    games = len(plan.schedule.games)
    owns_ray = not ray.is_initialized()
    previous = signal.getsignal(signal.SIGTERM)
    if owns_ray:
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        start_ray(None, include_dashboard=False, log_to_driver=False, namespace="unstable")
    try:
        signal.signal(signal.SIGTERM, raise_interrupt)  # after ray.init, which sets its own
        errors = ErrorLines(on_event)
        placed = plan.place()
        graph = build_eval_graph(plan, out_dir, placed)
        (done,) = start_collection(graph.collectors, 0, concurrency, games)
        while not ray.wait([done], timeout=1.0)[0]:
            if on_progress:
                on_progress(ray.get(graph.collectors[0].stats.remote()))
            errors.show(ray.get(graph.recorder.snapshot.remote()))
        counts = ray.get(done)
        if on_progress:
            on_progress(counts)
        wait_for_records(graph.recorder, "eval_games", games)
        errors.show(ray.get(graph.recorder.snapshot.remote()))
        ray.get([graph.recorder.close.remote(), graph.league.flush.remote()])
        graph.close_adapter_caches()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if owns_ray:
            stop_ray()
    return [game_result_from_dict(r) for r in read_jsonl(out_dir / "games" / "games.jsonl")]
