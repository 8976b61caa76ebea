"""The run's bookkeeper: every finished game to `games/games.jsonl`, moving means of game metrics, and the
learner's metrics fanned out to the chosen trackers (metrics.jsonl, W&B)."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unstable_core.io import append_jsonl, finite_json, fsync_file
from unstable_core.runtime.actors.request_batching import answer_each
from unstable_core.runtime.recovery.failures import FailureMonitor
from unstable_core.runtime.run_dir import GAMES
from unstable_core.types import GameResult

WINDOW = 100  # games per moving mean, as in UnstableBaselines v0.2
SYNC_EVERY_S = 2.0  # games.jsonl reaches the disk at least this often (the OS has each game at once)


def learner_outcome(info) -> float | None:
    """1 win, 0.5 draw, 0 loss for the learner's seats against the other seats; None when the learner holds
    every seat (mirror self-play) or the game failed."""
    learners = set(info.learner_pids)
    others = [p for p in info.final_rewards if p not in learners]
    if info.failed or not learners or not others:
        return None
    mine = max(info.final_rewards[p] for p in learners)
    theirs = max(info.final_rewards[p] for p in others)
    return 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0


def outcome_label(final_rewards: dict[int, float]) -> str:
    """'draw' when every seat scored the same, else 'seat<k>_win' for the best seat (lowest pid on ties)."""
    if len(set(final_rewards.values())) <= 1:
        return "draw"
    best = max(final_rewards.values())
    return f"seat{min(p for p, r in final_rewards.items() if r == best)}_win"


class Recorder:
    """Collects game results and metrics; writes them to the run directory."""

    def __init__(
        self,
        run_dir: str | Path,
        trackers: list[Any] = (),
        failure_window: int = 20,
        max_failure_rate: float = 0.5,
        learner_step: int = 0,
    ) -> None:
        """`learner_step`: where the learner starts (a resumed run's checkpoint), shown until its first update."""
        self.run_dir = Path(run_dir)
        self.failures = FailureMonitor(failure_window, max_failure_rate)
        (self.run_dir / "games").mkdir(parents=True, exist_ok=True)
        self.trackers = list(trackers)
        self.games_path = self.run_dir / GAMES
        self._window: dict[str, deque] = defaultdict(lambda: deque(maxlen=WINDOW))
        self.counts: dict[str, int] = defaultdict(int)
        self.learner: dict[str, float] = {}
        self.learner_step = learner_step
        self.inference: dict[str, float] = {}
        self.evals: dict[int, dict[str, float]] = {}  # checkpoint version -> scheduled evaluation summary
        self.started = self._synced_at = time.time()

    def add_game(self, result: GameResult) -> None:
        """Record a finished (or failed) game."""
        info = result.info
        kind = "eval" if info.eval else "train"
        self.counts[f"{kind}_games"] += 1
        self._write_game(result)
        self.failures.add(info.failed, info.error, info.game_idx, kind)
        if info.failed:
            self.counts[f"{kind}_failed"] += 1
            return
        key = f"{kind}/{info.env_id}"
        self.counts[f"{kind}_{outcome_label(info.final_rewards)}"] += 1
        steps = [s for t in result.trajectories if t.collect_data for s in t.steps]
        self._window[f"{key}/game_length"].append(info.num_turns)
        if steps:
            self._window[f"{key}/format_rate"].append(sum(s.format_ok for s in steps) / len(steps))
            self._window[f"{key}/invalid_move_rate"].append(sum(s.invalid_move for s in steps) / len(steps))
            self._window[f"{key}/completion_tokens"].append(
                sum(len(s.completion_ids) for s in steps) / len(steps)
            )
        outcome = learner_outcome(info)
        if outcome is not None:  # win rate W/n; score (W + D/2)/n
            self._window[f"{key}/win_rate"].append(float(outcome == 1.0))
            self._window[f"{key}/score"].append(outcome)

    def _write_game(self, result: GameResult) -> None:
        """Append the game to games.jsonl at once (a tracker that dies loses only the games on their way
        to it), fsynced at most every SYNC_EVERY_S seconds; its non-finite numbers are counted."""
        sync = time.time() - self._synced_at >= SYNC_EVERY_S
        nonfinite = append_jsonl(self.games_path, [result], sync=sync)
        if nonfinite:
            self.counts["nonfinite_values"] += nonfinite
        if sync:
            self._synced_at = time.time()

    def add_games(self, results: list[GameResult]) -> list[Any]:
        """Record many games in order (one Ray call per pass of the collector's loop); per game, None or
        the exception it raised."""
        return answer_each(self.add_game, results)

    def add_count(self, key: str, n: int = 1) -> None:
        """Count an event of the run (e.g. a game replayed after its inference actor died)."""
        self.counts[key] += n

    def set_inference_stats(self, stats: dict[str, float]) -> None:
        self.inference = dict(stats)

    def means(self) -> dict[str, float]:
        """Moving means of the game metrics, by `kind/env/metric`."""
        return {k: sum(v) / len(v) for k, v in self._window.items() if v}

    def log_learner(self, metrics: dict[str, float], step: int) -> None:
        """A learner update finished: log its metrics with the collection's moving means."""
        self.flush()
        self.learner, self.learner_step = dict(metrics), step
        record = {
            **{f"learner/{k}": v for k, v in metrics.items()},
            **{f"collection/{k}": v for k, v in self.means().items()},
            **{f"counts/{k}": v for k, v in self.counts.items()},
            **{f"inference/{k}": v for k, v in self.inference.items()},
        }
        record, nonfinite = finite_json(record)  # NaN or inf: null in the files, and counted
        self.counts["nonfinite_values"] += nonfinite
        record["counts/nonfinite_values"] = self.counts["nonfinite_values"]
        for t in self.trackers:
            t.log(record, step)

    def log_eval(self, metrics: dict[str, float], version: int) -> None:
        """A checkpoint's scheduled evaluation finished: log its summary against the checkpoint."""
        self.flush()
        self.evals[version] = dict(metrics)
        for t in self.trackers:
            t.log_eval(metrics, version)

    def snapshot(self) -> dict[str, Any]:
        """What a progress display shows."""
        return {
            "counts": dict(self.counts),
            "means": self.means(),
            "learner": self.learner,
            "learner_step": self.learner_step,
            "inference": self.inference,
            "evals": dict(self.evals),
            "elapsed_s": time.time() - self.started,
            "failures": self.failures.snapshot(),
            "stop_reason": self.failures.verdict(),
        }

    def flush(self) -> None:
        """Put the games written so far on disk (each game reaches the file when it is recorded)."""
        fsync_file(self.games_path)
        self._synced_at = time.time()

    def close(self) -> None:
        self.flush()
        for t in self.trackers:
            t.close()


def wait_for_records(recorder: Any, key: str, expected: int, timeout_s: float = 60.0) -> None:
    """Collectors send games to the recorder without waiting: wait until its count `key` reaches `expected`
    (or `timeout_s` passes)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ray.get(recorder.snapshot.remote())["counts"].get(key, 0) >= expected:
            return
        time.sleep(0.2)


class ErrorLines:
    """The first game of each distinct error in a recorder's snapshot, passed to `on_event` once as its line
    (what a run and an evaluation show while they play; the driver reads the snapshot)."""

    def __init__(self, on_event: Callable[[str], None] | None) -> None:
        self.on_event, self.shown = on_event, set()

    def show(self, snapshot: dict[str, Any]) -> None:
        for entry in snapshot.get("failures", {}).get("errors", []):
            if self.on_event is not None and entry["error"] not in self.shown:
                self.shown.add(entry["error"])
                self.on_event(f"{entry['kind']} game {entry['game_idx']} failed: {entry['error']}")


class RecorderActor:
    """Builds the chosen trackers inside the actor (they may hold files or sockets) around a `Recorder`."""

    def __init__(
        self,
        run_dir: str,
        trackers: list[tuple[Any, dict[str, Any]]],
        failure_window: int = 20,
        max_failure_rate: float = 0.5,
        learner_step: int = 0,
    ) -> None:
        built = [cls(**kw) for cls, kw in trackers]
        self._t = Recorder(run_dir, built, failure_window, max_failure_rate, learner_step)

    def add_game(self, result) -> None:
        self._t.add_game(result)

    def add_games(self, results) -> list:
        return self._t.add_games(results)

    def log_learner(self, metrics, step) -> None:
        self._t.log_learner(metrics, step)

    def log_eval(self, metrics, version) -> None:
        self._t.log_eval(metrics, version)

    def add_count(self, key, n=1) -> None:
        self._t.add_count(key, n)

    def set_inference_stats(self, stats) -> None:
        self._t.set_inference_stats(stats)

    def snapshot(self):
        return self._t.snapshot()

    def close(self) -> None:
        self._t.close()
