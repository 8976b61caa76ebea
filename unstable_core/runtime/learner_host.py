"""The learner's home in the run: pulls batches from the buffer, updates, checkpoints, publishes."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import ray

from unstable_core.io import atomic_write_json


class LearnerHost:
    """Runs `learning_steps` updates of a learner (hosted in a Ray actor). After each update the checkpoint
    is saved atomically and registered, so the inference actors play with it from the next game on."""

    def __init__(
        self,
        learner_factory: Any,
        learner_kwargs: dict[str, Any],
        algorithm_kwargs: dict[str, Any],
        *,
        buffer: Any,
        registry: Any,
        tracker: Any,
        batch_size: int,
        torch_threads: int | None = None,
    ) -> None:
        if torch_threads:
            import torch

            torch.set_num_threads(torch_threads)
        self.learner = learner_factory(**learner_kwargs)
        self.learner.initialize_algorithm(**algorithm_kwargs)
        self.buffer, self.registry, self.tracker = buffer, registry, tracker
        self.batch_size = batch_size
        self.run_dir = Path(learner_kwargs["run_dir"])
        self._stop = threading.Event()

    def buffer_kind(self) -> str:
        return getattr(self.learner, "buffer_kind", "step")

    def _next_batch(self) -> list | None:
        while not self._stop.is_set():
            batch = ray.get(self.buffer.get_batch.remote(self.batch_size))
            if batch:
                return batch
            time.sleep(0.25)
        return None

    def train(self, learning_steps: int) -> dict[str, Any]:
        """Run the updates; returns the last metrics and checkpoint."""
        last: dict[str, Any] = {}
        for _ in range(learning_steps):
            batch = self._next_batch()
            if batch is None:
                break
            started = time.time()
            metrics = dict(self.learner.update(batch))
            path = self.learner.save_checkpoint()
            step = self.learner.step
            atomic_write_json(self.run_dir / "reward_state.json", ray.get(self.buffer.state_dict.remote()))
            ray.get(self.registry.add_checkpoint.remote(f"ckpt-{step}", str(path), step))
            ray.get(self.buffer.set_policy_version.remote(step))
            buffer_stats = ray.get(self.buffer.stats.remote())
            metrics.update({f"buffer/{k}": float(v) for k, v in buffer_stats.items()})
            metrics.update(update_s=time.time() - started, batch_steps=len(batch))
            self.tracker.log_learner.remote(metrics, step)
            last = {"step": step, "checkpoint": str(path), "metrics": metrics}
        return last

    def stop(self) -> None:
        """Finish the update in progress (its checkpoint included), then return from `train`."""
        self._stop.set()
