"""The rollout benchmark's engine: actors started through the launch path, a collector that counts its
turns and tokens, the Ray cluster they run on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import instant_backend
from rollout_alone import MAX_MODEL_LEN
from rollout_games import ENV_ID, TEMPERATURE

from unstable_core.inference.base import GenerationOutput, GenerationRequest
from unstable_core.runtime.actors.collector import Collector


class MeasuredCollector(Collector):
    """The real Collector, counting the turns and completion tokens of its games as they are generated,
    with snapshots a driver can ask for while `collect` runs (start it with max_concurrency >= 2)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tokens = 0
        self.turns = 0
        self.active = 0  # game tasks in flight now
        self.peak_active = 0
        self._waiters: list[tuple[int, asyncio.Future]] = []  # (total turns, future)
        self._fill_waiters: list[tuple[int, asyncio.Future]] = []  # (games in flight, future)

    def _generator(self, engine: str, attempt: int, game_idx: int) -> Callable[..., Any]:
        generate = super()._generator(engine, attempt, game_idx)

        async def counted(request: GenerationRequest) -> GenerationOutput:
            output = await generate(request)
            self.tokens += len(output.token_ids)  # exactly the step's completion_ids
            self.turns += 1
            self._wake()
            return output

        return counted

    async def _run(self, kind: str, ticket: int | None = None) -> Any:
        # the whole life of a game task, league snapshot included (counts leave out cancelled games)
        self.active += 1
        self.peak_active = max(self.peak_active, self.active)
        self._fill_waiters = _resolve(self._fill_waiters, self.active, self.snapshot)
        try:
            return await super()._run(kind, ticket)
        finally:
            self.active -= 1

    def _wake(self) -> None:
        self._waiters = _resolve(self._waiters, self.turns, self.snapshot)

    def snapshot(self) -> dict[str, float]:
        """Counters now: clock (s), tokens, turns, games in flight (now, at most), failed games, and the
        process's peak RSS (bytes)."""
        return {
            "clock": time.perf_counter(),
            "tokens": self.tokens,
            "turns": self.turns,
            "in_flight": self.active,
            "peak_in_flight": self.peak_active,
            "failed": self.counts["failed"],
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # KiB on Linux
        }

    async def snapshot_after(self, turns: int) -> dict[str, float]:
        """The snapshot taken the moment the total turn count reaches `turns`."""
        if self.turns >= turns:
            return self.snapshot()
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((turns, future))
        return await future

    async def snapshot_when_in_flight(self, games: int) -> dict[str, float]:
        """The snapshot taken the moment `games` games are in flight at once."""
        if self.active >= games:
            return self.snapshot()
        future = asyncio.get_running_loop().create_future()
        self._fill_waiters.append((games, future))
        return await future


def _resolve(
    waiters: list[tuple[int, asyncio.Future]], level: int, snapshot: Callable[[], dict[str, float]]
) -> list[tuple[int, asyncio.Future]]:
    """Answer the waiters whose threshold `level` has reached with one snapshot; the others still wait."""
    due = [f for n, f in waiters if level >= n and not f.done()]
    if due:
        snap = snapshot()
        for future in due:
            future.set_result(snap)
    return [(n, f) for n, f in waiters if level < n]


@attrs.define
class Window:
    """What an engine did between two snapshots."""

    seconds: float
    tokens: int
    turns: int
    end: dict[str, float]

    @property
    def tokens_per_s(self) -> float:
        """Generated (completion) tokens per second."""
        return self.tokens / self.seconds

    @property
    def turns_per_s(self) -> float:
        """Game turns per second."""
        return self.turns / self.seconds


@attrs.define
class Engine:
    """One inference actor, the league, a recorder and a measured collector, wired as run.py does."""

    inference: Any
    league: Any
    recorder: Any
    collector: Any
    collecting: Any = None

    @classmethod
    def start(
        cls,
        backend: str,
        model: str,
        run_dir: str,
        max_tokens: int,
        seed: int = 0,
        game_timeout_s: float = 600.0,
        backend_options: dict[str, Any] | None = None,
    ) -> Engine:
        """Start the actors as `unstable play` does, through the launch path's `build_graph` (Ray must be
        initialised; one inference actor, the collector measured), and wait until the backend is loaded."""
        import ray

        from unstable_core.config import RunConfig
        from unstable_core.runtime.launch.build import build_graph
        from unstable_core.runtime.launch.plan import RunPlan

        Path(run_dir).mkdir(parents=True, exist_ok=True)
        cfg = RunConfig(
            model_name=model, backend=backend, train_envs=[f"{ENV_ID}:2:2"], sampler="mirror",
            env_sampler="random", prompt_template="default", temperature=TEMPERATURE,
            max_generation_len=max_tokens, max_turns=60, game_timeout_s=game_timeout_s, seed=seed,
            max_loras=8, max_model_len=MAX_MODEL_LEN, num_inference_actors=1, num_eval_workers=0, trackers=[],
            runs_dir=str(Path(run_dir).parent),
        )  # fmt: skip
        plan = RunPlan.resolve(cfg, learn=False, backend_options=backend_options or {})
        graph = build_graph(plan, Path(run_dir), plan.place(), num_eval=0, collector_cls=MeasuredCollector)
        inference, league, recorder = graph.engines["main"][0], graph.league, graph.recorder
        (collector,) = graph.collectors
        ray.get([inference.ping.remote(), collector.snapshot.remote()])
        return cls(inference, league, recorder, collector)

    def collect(self, games_in_flight: int) -> None:
        """Start keeping `games_in_flight` games in flight (stopping the previous collection first)."""
        self.stop_collecting()
        self.collecting = self.collector.collect.remote(games_in_flight)

    def window(self, warmup_turns: int, turns: int, timeout_s: float = 1800.0) -> Window:
        """Skip `warmup_turns` turns from now, then measure the next `turns` turns."""
        now = self._get(self.collector.snapshot.remote(), timeout_s)
        start = self._get(self.collector.snapshot_after.remote(now["turns"] + warmup_turns), timeout_s)
        end = self._get(self.collector.snapshot_after.remote(start["turns"] + turns), timeout_s)
        return Window(
            end["clock"] - start["clock"], end["tokens"] - start["tokens"], end["turns"] - start["turns"], end
        )

    def fill(self, games: int, timeout_s: float = 600.0) -> dict[str, float]:
        """Wait until `games` games are in flight at once; the snapshot of that moment."""
        return self._get(self.collector.snapshot_when_in_flight.remote(games), timeout_s)

    def _get(self, ref: Any, timeout_s: float) -> Any:
        """`ray.get(ref)`, failing loudly when collect() ended (crashed) first or nothing came in time."""
        import ray

        from unstable_core.errors import UnstableError

        done, _ = ray.wait([ref, self.collecting], num_returns=1, timeout=timeout_s)
        if ref in done:
            return ray.get(ref)
        if done:
            ray.get(self.collecting)  # raises the collector's error
            raise UnstableError("the collector stopped before the measurement ended; see its log")
        raise UnstableError(
            f"no measurement within {timeout_s:.0f} s; are the games failing? (see games.jsonl)"
        )

    def snapshot(self) -> dict[str, float]:
        """The collector's counters now."""
        import ray

        return ray.get(self.collector.snapshot.remote())

    def stop_collecting(self, idle_timeout_s: float = 120.0) -> None:
        """Stop the games in flight, wait for collect() to return and for the batch the inference actor
        may still be running to end: a measurement taken next has the CPU (and memory bus) to itself."""
        import ray

        from unstable_core.errors import UnstableError

        if self.collecting is not None:
            self.collector.stop.remote()
            ray.get(self.collecting)
            self.collecting = None
        deadline = time.monotonic() + idle_timeout_s
        while time.monotonic() < deadline:
            stats = ray.get(self.inference.stats.remote())
            if not stats["running"] and not stats["queued"]:
                return
            time.sleep(0.05)
        raise UnstableError(
            f"the inference actor still had a batch running {idle_timeout_s:.0f} s after the games stopped; "
            "a measurement now would share the CPU with it"
        )

    def kill(self) -> None:
        """Stop collecting and end every actor of this engine."""
        import ray

        self.stop_collecting()
        for actor in (self.collector, self.inference, self.league, self.recorder):
            ray.kill(actor)

    def torch_threads(self) -> int:
        """The torch CPU threads of the inference actor's process."""
        import ray

        def threads(_actor: Any) -> int:
            import torch

            return torch.get_num_threads()

        return ray.get(self.inference.__ray_call__.remote(threads))


def init_ray() -> None:
    """A local Ray cluster as run.py starts it, whose workers all register the instant backend."""

    import ray
    from ray import cloudpickle

    from unstable_core.runtime.launch.cluster import LOCAL_CPUS

    instant_backend.register_instant_backend()
    # shipped by value: Ray workers cannot import this folder, it is no package (this module holds the
    # measured collector and the function the inference actor runs for its thread count)
    cloudpickle.register_pickle_by_value(instant_backend)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # address "local": a cluster of its own, never another run's on the same machine (CI shares it)
    ray.init(
        address="local",
        num_cpus=LOCAL_CPUS,
        include_dashboard=False,
        log_to_driver=False,
        namespace="unstable-bench",
        runtime_env={"worker_process_setup_hook": instant_backend.register_instant_backend},
    )


@contextlib.contextmanager
def bench_cluster() -> Iterator[str]:
    """A local Ray cluster (`init_ray`) and a temporary folder for the engines' run folders; Ray is shut
    down before the folder goes: its actors write there until they die."""
    import ray

    with tempfile.TemporaryDirectory(prefix="bench-rollout-", ignore_cleanup_errors=True) as tmp:
        init_ray()
        try:
            yield tmp
        finally:
            ray.shutdown()
