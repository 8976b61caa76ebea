"""A run: `build(...)` resolves and checks it, `Run.start()` wires its actors in named phases, `wait()`
watches it, `stop()` ends it cleanly.

The data path: collectors play games (InferenceActor x N per engine) and send each to the recorder (games.jsonl),
the league (ratings) and the buffer (rewards, staleness); the learner pulls batches from the buffer, saves a
checkpoint after each update and registers it in the league, whose next games play it. All are Ray actors;
games are coroutines inside the collectors.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unstable_core.config import RunConfig, config_from_dict, merge_layers
from unstable_core.errors import ConfigError, RunFailed, RunStopped, debug_enabled
from unstable_core.rewards.specs import pipeline
from unstable_core.run_lock import LOCK_NAME, RunLock
from unstable_core.runtime.actors.probes import ScheduledProbes
from unstable_core.runtime.actors.recorder import ErrorLines
from unstable_core.runtime.graph import ActorGraph
from unstable_core.runtime.launch.build import (
    build_graph,
    record_resumed_state,
    start_collection,
)
from unstable_core.runtime.launch.cluster import end_watchdog, start_ray, stop_ray
from unstable_core.runtime.launch.plan import RunPlan
from unstable_core.runtime.launch.preflight import claim_run_dir
from unstable_core.runtime.recovery.learner_group import group_failure
from unstable_core.runtime.recovery.liveness import (
    ActorDied,
    InferenceWatch,
    check_alive,
)
from unstable_core.runtime.recovery.resume import ResumePoint, SavedRun, prepare_logs, record_event
from unstable_core.runtime.recovery.shutdown import close_files, write_summary
from unstable_core.runtime.recovery.stall import LearnerPhase, PipelineStalled, StallWatch
from unstable_core.runtime.recovery.stop_decision import StopDecision, decide_stop
from unstable_core.runtime.run_dir import CONFIG, checkpoint_steps


class Run:
    """A training run (or, with `learn=False`, a run that only plays): `start()`, then `wait()` or `stop()`."""

    @classmethod
    def open(cls, cfg: RunConfig, learn: bool = True) -> Run:
        """A new run: resolve its plan, check it (`RunPlan.check`: every check before start, in one place),
        then claim its folder and lock it. A refused run leaves no folder, and an existing one is never
        touched; the lock makes one process per run directory."""
        plan = RunPlan.resolve(cfg, learn)
        plan.check()
        run_dir = claim_run_dir(cfg.runs_dir, cfg.run_name)
        return cls(plan, run_dir, RunLock.acquire(run_dir))

    @classmethod
    def resume(cls, run_dir: str | os.PathLike, overrides: dict[str, Any] | None = None) -> Run:
        """Continue the run in `run_dir`: its config.toml with the `overrides` that do not change what it
        learns (`SavedRun.read`), its plan checked as a new run's, then its folder locked (a second --resume,
        or a resume of a run that is still going, is refused naming the process) and its checkpoints read
        once, before Ray and the model (`SavedRun.resume_point`): one that does not load is skipped for an
        older one (`resume_point.lines()` says so), and none loading is a ConfigError naming the file."""
        saved = SavedRun.read(run_dir, overrides or {})
        plan = RunPlan.resolve(saved.cfg)
        plan.check(resume=True)
        folder = saved.run_dir.resolve()
        run = cls(plan, folder, RunLock.acquire(folder), saved)
        try:
            run.resume_point = saved.resume_point(plan.components.learner)
        except BaseException:
            run.lock.release()
            raise
        return run

    def __init__(self, plan: RunPlan, run_dir: Path, lock: RunLock, saved: SavedRun | None = None) -> None:
        """A checked run in its locked folder (`Run.open` or `Run.resume` makes one); `saved`: the run it
        continues."""
        self.plan, self.cfg, self.learn, self.components = plan, plan.cfg, plan.learn, plan.components
        self.run_dir, self.lock, self.saved = run_dir, lock, saved
        self.resume_point: ResumePoint | None = None
        for _cls, kwargs in self.components.trackers:
            kwargs.update(run_dir=str(self.run_dir), run_name=self.run_dir.name)
        self.actors: ActorGraph | None = None
        self._collect_refs: list[Any] = []
        self._train_ref: Any = None
        self._follower_refs: list[Any] = []
        self._owns_ray = False
        self.started_at = 0.0
        self.summary: dict[str, Any] = {}
        self.index_base = 0  # the first game index of this process (a resumed run numbers after the recorded)
        self._watch: InferenceWatch | None = None
        self._probes: ScheduledProbes | None = None

    # ---- start
    def start(
        self,
        learning_steps: int | None = None,
        num_collection_workers: int | None = None,
        num_eval_workers: int | None = None,
        max_games: int | None = None,
    ) -> Run:
        """Start every actor, the collection and (unless this run only plays) the learner, phase by phase."""
        cfg = self.cfg
        try:
            self._init_ray()
            placed = self.plan.place()
        except BaseException:
            self._drop_empty_run_dir()
            raise
        resume_record = self._open_logs()
        point = self.resume_point
        self.started_at = time.time()
        num_eval = cfg.num_eval_workers if num_eval_workers is None else num_eval_workers
        self.actors = actors = build_graph(self.plan, self.run_dir, placed, point, self.index_base, num_eval)
        if resume_record is not None:
            record_resumed_state(self.run_dir, resume_record, actors)
        self._collect_refs = start_collection(
            actors.collectors, num_collection_workers or cfg.num_train_workers, num_eval, max_games
        )
        if self.learn:
            self._train_ref = actors.learner.train.remote(learning_steps or cfg.learning_steps)
            # the other ranks update on what rank 0 hands them; a dead one fails rank 0's next collective
            self._follower_refs = [w.train.remote(0) for w in actors.learner_workers]
        if actors.probes is not None:
            kept = point.step if point is not None else 0
            self._probes = ScheduledProbes.start(actors.probes, self.run_dir, cfg.eval_every, kept)
        return self

    def _init_ray(self) -> None:
        import ray

        if ray.is_initialized():
            return
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        # a local cluster's watchdog holds the lock too: after a kill of this process it is let go only
        # once the cluster's processes are gone
        self.lock.on_release(end_watchdog)
        start_ray(
            self.cfg.ray_address,
            hold_fds=[self.lock.fileno()],
            include_dashboard=False,
            log_to_driver=False,
            namespace="unstable",
        )
        self._owns_ray = True

    def _drop_empty_run_dir(self) -> None:
        """A run that failed before writing anything leaves no folder behind (nor a Ray cluster)."""
        if self._owns_ray:
            stop_ray()
        self.lock.release()
        if [p.name for p in self.run_dir.iterdir()] == [LOCK_NAME]:
            with contextlib.suppress(OSError):
                (self.run_dir / LOCK_NAME).unlink()
                self.run_dir.rmdir()  # only an empty directory

    def _open_logs(self) -> dict[str, Any] | None:
        """A new run saves its config; a resumed one trims its logs to its resume point (`Run.resume` found
        it) and returns the resume record to complete once the actors have their state back."""
        if self.saved is None:
            self.cfg.save(self.run_dir / CONFIG)
            return None
        record = prepare_logs(self.resume_point, self.run_dir, self.saved.changed)
        self.index_base = record["next_game_index"]
        return record

    # ---- watch
    def progress(self) -> dict[str, Any]:
        """Recorder snapshot plus the league's ratings and the inference figures (the first actor's, with the
        busy fraction averaged over every inference actor), for a progress display."""
        import ray

        snap = ray.get(self.actors.recorder.snapshot.remote())
        snap["league"] = ray.get(self.actors.league.to_dict.remote())
        try:
            every = ray.get([a.stats.remote() for a in self.actors.inference_actors()], timeout=5)
            stats = {
                **every[0],
                "busy_fraction": sum(s.get("busy_fraction", 0.0) for s in every) / len(every),
            }
            self.actors.recorder.set_inference_stats.remote(stats)
            snap["inference"] = stats
        except Exception:  # a restarting inference actor must not stop the display
            pass
        return snap

    def wait(
        self,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        poll_s: float = 2.0,
        on_event: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """Block until the learner has done its steps (or a play run its games); then stop and summarise.

        Each distinct game error is passed to `on_event` once (default: printed). A run whose games keep
        failing, or whose learner or collection raised, is stopped and raises RunFailed with one line."""
        import ray

        on_event = on_event or print
        learning = [self._train_ref, *self._follower_refs] if self._train_ref is not None else []
        waiting = learning or list(self._collect_refs)
        # while learning, a collector that ends (it only ends by dying) would leave the learner waiting
        watched = list(self._collect_refs) if self._train_ref is not None else []
        errors = ErrorLines(on_event)
        who = "an actor"
        names = self.actors.names()
        self._watch = inference = InferenceWatch(
            {names[a._actor_id.hex()]: a for a in self.actors.inference_actors()}
        )
        learner = self.actors.learner if self._train_ref is not None else None
        stall = StallWatch(self.cfg.effective_stall_timeout_s, self.cfg.batch_size) if learner else None
        try:
            while waiting:
                done, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=poll_s)
                for ref in done:
                    who = "the learner" if ref in learning else "collection"
                    ray.get(ref)  # surface a crashed learner or collector
                ended, watched = ray.wait(watched, num_returns=len(watched), timeout=0)
                for ref in ended:
                    who = "collection"
                    ray.get(ref)
                    raise ActorDied("a collector", "it stopped collecting")
                check_alive(self.actors)
                self._check_progress(stall)
                if self._probes is not None:
                    self._probes.poll()
                for name, line in inference.poll():
                    on_event(line)
                    record_event(self.run_dir, "actor_restarted", actor=name)
                snap = self.progress()
                errors.show(snap)
                if snap.get("stop_reason"):
                    raise RunFailed(f"run stopped: {snap['stop_reason']}")
                if on_progress:
                    on_progress(snap)
            if self._train_ref is not None and self.cfg.eval_every:
                self._drain_evals(on_progress, poll_s)
        except Exception as exc:
            decision = decide_stop(
                exc,
                who,
                self.run_dir,
                names=names,
                learner_failure=lambda failed: group_failure(self.actors, learning, failed),
                debug=debug_enabled(),
            )
            if decision is None:
                raise
            if decision.died is not None:
                raise self._stop_after_death(decision) from None
            self.stop()
            raise RunFailed(decision.line(self.run_dir)) from exc
        return self.stop()

    def _check_progress(self, stall: StallWatch | None) -> None:
        """Raise PipelineStalled when the learner has waited for a batch, or been in one update, for the
        stall timeout (a learner too busy to answer is the liveness check's to judge)."""
        import ray

        if stall is None:
            return
        try:
            phase, buffer = ray.get(
                [self.actors.learner.phase.remote(), self.actors.buffer.stats.remote()], timeout=10
            )
        except ray.exceptions.GetTimeoutError:
            return
        why = stall.check(time.time(), LearnerPhase(**phase), buffer)
        if why is not None:
            raise PipelineStalled(why)

    def _drain_evals(self, on_progress: Callable[[dict[str, Any]], None] | None, poll_s: float) -> None:
        """After the last update: let the collectors play the scheduled evaluations of every published
        checkpoint (no more training games), each game bounded by game_timeout_s; then wait for the probes of
        the last checkpoints (--eval-probe)."""
        import ray

        plan = self.plan.scheduled_eval
        per_ckpt = len(plan.specs) * plan.games
        rounds = -(-per_ckpt // max(1, self.cfg.num_eval_workers // len(self.actors.collectors)))
        timeout_s = (rounds + 1) * self.cfg.game_timeout_s
        waiting = [c.drain_evals.remote(timeout_s) for c in self.actors.collectors]
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=poll_s)
            ray.get(done)
            if on_progress:
                on_progress(self.progress())
        if self._probes is not None:  # the last checkpoints' probes, after their games
            self._probes.finish()

    def _stop_after_death(self, decision: StopDecision) -> RunStopped:
        """An actor of the run died or hung (`decision.died`): stop the others (the last checkpoint stays
        complete), record it in metrics.jsonl and return the one-line error that says how to continue."""
        died = decision.died
        try:
            self.stop(timeout_s=getattr(died, "stop_timeout_s", 60.0), release=False)
        except Exception:  # the stop of a broken run must not hide why it broke
            self.abort(release=False)
        step = max(checkpoint_steps(self.run_dir), default=0)
        with contextlib.suppress(OSError):  # an unwritable run folder must not hide why the run stopped
            record_event(self.run_dir, died.event, actor=died.who, reason=died.why, last_checkpoint_step=step)
        self.lock.release()
        return RunStopped(decision.line(self.run_dir, step))

    # ---- stop
    def stop(self, timeout_s: float = 300.0, release: bool = True) -> dict[str, Any]:
        """Stop cleanly: the update in progress finishes (its checkpoint complete), games are cancelled,
        files are flushed, the local Ray cluster is shut down; then (`release`) the run directory's lock
        is let go. Returns the run's summary."""
        try:
            return self._stop(timeout_s)
        finally:
            if release:
                self.lock.release()

    def _stop(self, timeout_s: float) -> dict[str, Any]:
        import ray

        actors = self.actors
        if not ray.is_initialized() or actors is None:
            return self.summary
        if actors.learner is not None:  # the update in progress finishes, its checkpoint complete
            actors.learner.stop.remote()
            if self._train_ref is not None:
                ray.wait([self._train_ref], timeout=timeout_s)
        if actors.buffer is not None:
            actors.buffer.stop.remote()
        for c in actors.collectors:
            c.stop.remote()
        ray.wait(self._collect_refs, num_returns=len(self._collect_refs), timeout=60)
        restarts = self._watch.restarts if self._watch is not None else 0
        snap = close_files(actors, self.run_dir, self.index_base, restarts)
        actors.close_adapter_caches()
        self.summary = {"run_dir": str(self.run_dir), "elapsed_s": time.time() - self.started_at, **snap}
        if self.learn:
            self.summary["reward_pipeline"] = pipeline(self.cfg, self.components)
        self.actors = None
        if self._owns_ray:
            stop_ray()
        return write_summary(self.run_dir, self.summary, self.learn)

    def abort(self, release: bool = True) -> dict[str, Any]:
        """Stop at once: shut the local Ray cluster down without waiting for the update in progress
        (checkpoints are written atomically, so the last complete one stays usable)."""
        self.actors = None
        if self._owns_ray:
            stop_ray()
        if release:
            self.lock.release()
        self.summary = {"run_dir": str(self.run_dir), "aborted": True}
        return self.summary


def build(config: RunConfig | None = None, resume: str | os.PathLike | None = None, **overrides: Any) -> Run:
    """A training run from a `RunConfig` and/or keyword overrides: UnstableBaselines v0.2's build() names and values
    work too (None for its defaults, opponent_sampling_strategy="none", its vllm_config keys).
    `resume=RUN_DIR` continues that run from its last complete checkpoint (its config.toml, with the
    overrides that do not change what it learns)."""
    if resume is not None:
        if config is not None:
            raise ConfigError("build(resume=...) reads the run's own config.toml: pass no config")
        return Run.resume(resume, overrides)
    base = config.to_dict() if config is not None else {}
    return Run.open(config_from_dict(merge_layers(base, overrides)))
