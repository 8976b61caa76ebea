"""The learner's home in the run: pulls batches from the buffer, updates, checkpoints, publishes."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import ray

from unstable_core.errors import UnstableError
from unstable_core.fault_points import pause_point
from unstable_core.learners.checkpoint import prune_optimizer_states
from unstable_core.learners.data_parallel import LearnerGroup, default_backend
from unstable_core.learners.settings import LearnerConfig
from unstable_core.runtime.recovery.failures import NonFiniteUpdates
from unstable_core.runtime.recovery.liveness import ANSWER_TIMEOUT_S
from unstable_core.runtime.run_dir import RUN_STATE


def peak_rss_gb() -> float:
    """The largest resident memory this process has had, in GB (what an OOM killer compares)."""
    import resource
    import sys

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / (1 << 30 if sys.platform == "darwin" else 1 << 20)  # bytes on macOS, KiB on Linux


class LearnerActor:
    """Runs `learning_steps` updates of a learner (hosted in a Ray actor). After each update the checkpoint
    is saved atomically and registered, so the inference actors play with it from the next game on.

    With `world_size` > 1 it is rank `rank` of a data-parallel group (`join_group`): rank 0 pulls each batch,
    hands it to the others and alone writes checkpoints, metrics and the league; every rank updates on its
    share of the batch's micro-batches (`learners.data_parallel`)."""

    def __init__(
        self,
        learner_cls: type,
        config: LearnerConfig,
        algorithm_kwargs: dict[str, Any],
        *,
        run_dir: str,
        device: str | None,
        buffer: Any,
        league: Any,
        recorder: Any,
        torch_threads: int | None = None,
        collectors: list[Any] = (),
        resume_from: str | None = None,
        max_nonfinite_updates: int = 3,
        keep_optimizer_states: int = 2,
        compact_adapters: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if torch_threads:
            import torch

            torch.set_num_threads(torch_threads)
        self.learner = learner_cls(config, run_dir=run_dir, device=device)
        self.learner.initialize_algorithm(**algorithm_kwargs)
        if resume_from is not None:
            self.learner.load_checkpoint(resume_from)  # adapter, optimizers, step = policy version
        self.collectors = list(collectors)
        self.buffer, self.league, self.recorder = buffer, league, recorder
        self.batch_size = config.batch_size
        self.run_dir = Path(run_dir)
        self._stop = threading.Event()
        self.nonfinite = NonFiniteUpdates(max_nonfinite_updates)
        self.keep_optimizer_states = keep_optimizer_states
        self.compact_adapters = compact_adapters
        self.rank, self.world_size = rank, world_size
        self._phase = ("starting", time.time())  # what `phase()` reports: a stalled pipeline's evidence

    def learner_group(self) -> LearnerGroup:
        """The learner's group, as this (rank 0) worker hosts its rendezvous: on its node, a free port."""
        return LearnerGroup.here(self.world_size, default_backend(self.learner.device))

    def join_group(self, group: LearnerGroup) -> None:
        """Join the learner's process group (every rank calls this at once; it returns when all have joined)
        and take rank 0's parameters, optimizer state and step."""
        group.join(self.learner, self.rank)

    def buffer_kind(self) -> str:
        return getattr(self.learner, "buffer_kind", "step")

    def phase(self) -> dict[str, Any]:
        """What the learner does now ("starting", "waiting" for a batch, "updating", "done"), since when,
        and its step: the run's stall watch reads it (`runtime.recovery.stall`)."""
        state, since = self._phase
        return {"state": state, "since": since, "step": self.learner.step}

    def _next_batch(self) -> list | None:
        self._phase = ("waiting", time.time())
        while not self._stop.is_set():
            batch = ray.get(self.buffer.get_batch.remote(self.batch_size))
            if batch:
                return batch
            time.sleep(0.25)
        return None

    def step(self) -> int:
        return self.learner.step

    def devices(self) -> dict[str, Any]:
        """The GPUs Ray gave this actor and the learner's device (see `devices.placed_on`)."""
        from unstable_core.runtime.actors.devices import placed_on

        return placed_on(self.learner.device)

    def pid(self) -> int:
        """The actor's process id (fault-injection tests kill it)."""
        return os.getpid()

    def run_state(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """What a resumed run needs beside the learner's own files: the league before this checkpoint is
        added, the reward transforms' state, the collectors' samplers and RNG streams, this step's metrics."""
        league, rewards = ray.get([self.league.to_dict.remote(), self.buffer.state_dict.remote()])
        # as long as the run's liveness check waits: a busy collector on a loaded machine is slow to answer
        collectors = ray.get([c.state_dict.remote() for c in self.collectors], timeout=ANSWER_TIMEOUT_S)
        return {
            "league": league,
            "rewards": rewards,
            "collectors": collectors,
            "metrics": {f"learner/{k}": v for k, v in metrics.items()},
        }

    def train(self, learning_steps: int) -> dict[str, Any]:
        """Update until the learner's step (policy version) reaches `learning_steps` (a resumed learner
        starts at its checkpoint's step); returns the last metrics and checkpoint. A rank > 0 of a group
        updates on the batches rank 0 hands it until rank 0 ends."""
        group = self.learner.data_parallel
        if group is not None and group.rank > 0:
            return self._follow()
        from unstable_core.learners.data_parallel import lead

        return lead(group, lambda: self._lead(learning_steps, group))  # the other ranks end with it

    def _follow(self) -> dict[str, Any]:
        from unstable_core.learners.data_parallel import follow

        follow(self.learner)
        return {"step": self.learner.step}

    def _lead(self, learning_steps: int, group: Any) -> dict[str, Any]:
        last: dict[str, Any] = {}
        clock = PipelineClock()
        while self.learner.step < learning_steps:
            batch = self._next_batch()
            if batch is None:
                break
            if group is not None:
                group.broadcast(batch)
            self._phase = ("updating", time.time())
            pause_point(f"batch-{self.learner.step + 1}")
            started = time.time()
            metrics = dict(self.learner.update(batch))
            pause_point(f"update-{self.learner.step}")
            give_up = self.nonfinite.observe(metrics)
            metrics.update(update_s=time.time() - started, batch_steps=len(batch), peak_rss_gb=peak_rss_gb())
            path = self.learner.save_checkpoint(extra_json={RUN_STATE: self.run_state(metrics)})
            prune_optimizer_states(path.parent, self.keep_optimizer_states, self.compact_adapters)
            step = self.learner.step
            ray.get(self.league.add_checkpoint.remote(f"ckpt-{step}", str(path), step))
            ray.get(self.buffer.set_policy_version.remote(step))
            buffer_stats = ray.get(self.buffer.stats.remote())
            metrics.update({f"buffer/{k}": float(v) for k, v in buffer_stats.items()})
            metrics.update(clock.figures(time.time() - started, buffer_stats))
            logged = self.recorder.log_learner.remote(metrics, step)
            last = {"step": step, "checkpoint": str(path), "metrics": metrics}
            if give_up:
                ray.get(logged)  # in metrics.jsonl before the run stops
                raise UnstableError(self.nonfinite.message(metrics))
        self._phase = ("done", time.time())
        return last

    def stop(self) -> None:
        """Finish the update in progress (its checkpoint included), then return from `train`."""
        self._stop.set()


class PipelineClock:
    """How the learner's time went since `train` began: its share spent updating (update, checkpoint and
    publication; the rest is waiting for data), and the training steps generated and used per minute."""

    def __init__(self) -> None:
        self.started = time.time()
        self.busy_s = 0.0

    def figures(self, update_s: float, buffer_stats: dict[str, Any]) -> dict[str, float]:
        self.busy_s += update_s
        minutes = max(time.time() - self.started, 1e-9) / 60
        generated, used = buffer_stats.get("steps_generated", 0), buffer_stats.get("steps_served", 0)
        return {
            "pipeline/learner_busy_fraction": min(1.0, self.busy_s / (minutes * 60)),
            "pipeline/steps_generated_per_min": generated / minutes,
            "pipeline/steps_used_per_min": used / minutes,
            "pipeline/used_share": used / generated if generated else 0.0,
        }
