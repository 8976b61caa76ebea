"""The rollout engine against its parts, measured in one run (ratios against baselines of the same run).

a) the backend alone: generated tokens/s for B prompts in one batch (TransformersBackend, in-process);
a') its FLOP/s, 2 x parameters x generated tokens/s (prompt tokens and attention not counted), against
   the machine's fp32 matmul at a decode step's shape [B, H] x [H, I] (the model's hidden and MLP
   widths; the [2048, H] x [H, I] figure beside it): the faster of torch.matmul and oneDNN's linear on a
   packed weight, the kernel the backend runs on CPU; with the backend's threads (target >= 0.4);
a'') its FLOP/s against the model's own Linear layers applied as one decode step applies them (weights
   read from memory): the ceiling at this batch; a''') the largest gap between a log-prob the backend
   records and the one a plain fp32 model (torch's kernels, as the learner's) computes for that token;
b) the engine (InferenceActor + Collector actor wired as run.py wires them, B TicTacToe games in flight):
   generated tokens/s, and b/a (target >= 0.85);
c) B games in flight against one game at a time on the same engine: tokens/s ratio (target >= 4);
c') the most c can be on this machine: B x the model's decode step at batch 1 / its step at batch B (at
   a first prompt's length), which c reaches only if every engine step were full and prompts were free;
d) on a backend answering a random legal move at once: engine turns/s against a plain in-process
   TextArena loop with the same move choice (target >= 0.25);
d') `play_game` in-process on that backend, no Ray: turns/s (target >= 5,000);
d'') the engine through Ray against d') (target >= 0.5);
e) the collector's peak RSS with 1,024 games in flight on that backend, its answers delayed 1 s so that
   they stay in flight (target <= 1 GiB).

With --backend vllm: (a), (b) and (c) of the transformers backend and of vLLM's (VLLMBackend, on the CPU
through vLLM's CPU build), rounds of the two interleaved on engines loaded side by side, and each one's
generated tokens/s alone for one batch of 8, 32 and 64 prompts (sampled unseeded, as a run samples);
then a table comparing the two.

  python benchmarks/rollout.py                    # the embedded smollm2-135m (minutes on a CPU)
  python benchmarks/rollout.py --quick --model D  # tiny sizes, e.g. a tiny random model folder D
  python benchmarks/rollout.py --backend vllm     # transformers against vLLM (./install.sh --vllm)
  python benchmarks/rollout.py --backend vllm --quick  # by default on a tiny random model (hidden 128)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark fake, also when imported

import instant_backend  # noqa: E402

from unstable_core.inference.base import GenerationOutput, GenerationRequest, SamplingParams  # noqa: E402
from unstable_core.runtime.actors.collector import Collector  # noqa: E402

ENV_ID = "TicTacToe-v0-train"
TEMPERATURE = 0.7  # `unstable play`'s default
PARITY = 1e-4  # a'''): the largest log-prob gap the learner's own tests allow an on-policy token
GiB = 1024**3
MAX_MODEL_LEN = 4096  # of every backend here, as the engine's inference actor had it
VLLM_KV_TOKENS = 1024  # per sequence in vLLM's KV cache plan: a turn's prompt and answer fit it
BACKENDS = ("transformers", "vllm")  # --backend vllm measures both, rounds in this order
SWEEP = (8, 32, 64)  # --backend vllm: each backend alone, one batch of this many prompts
TINY_VLLM_HIDDEN = 128  # --backend vllm --quick's tiny model: vLLM's CPU attention needs head_dim >= 32


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


def backend_kwargs(model: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A backend's constructor options, in the inference actor as alone: these defaults, then `options`."""
    kwargs = {"model": model, "max_batch_size": 32, "max_loras": 8, "max_model_len": MAX_MODEL_LEN}
    return {**kwargs, "device": None, **(options or {})}


def first_prompts(model: str, n: int, seed: int = 0) -> list[list[int]]:
    """The first-turn prompt ids of `n` TicTacToe games, as the game loop renders them."""
    import textarena

    from unstable_core.games.templates import render_prompt
    from unstable_core.model_loading import load_tokenizer

    tokenizer = load_tokenizer(model)
    prompts = []
    for i in range(n):
        env = textarena.make(ENV_ID)
        env.reset(num_players=2, seed=seed + i)
        _, observation = env.get_observation()
        prompts.append(render_prompt("default", observation, tokenizer)[1])
    return prompts


@attrs.frozen
class Unseeded:
    """A backend whose requests are sampled without their seed, as `unstable run` samples. vLLM's CPU build
    (0.32.0) kills its engine ("CPU Generator does not use offset") when a seeded request's prefill is
    split over engine steps, as a batch of 32 first prompts is (more than 2,048 prompt tokens a step)."""

    backend: Any

    @property
    def tokenizer(self) -> Any:
        return self.backend.tokenizer

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        unseeded = attrs.evolve(request, params=attrs.evolve(request.params, seed=None))
        return await self.backend.generate(unseeded)


@attrs.define
class BackendAlone:
    """(a) a backend alone, in this process: one batch of B first-turn game prompts at a time. The FLOP/s,
    decode-step and log-prob measures read a TransformersBackend's model."""

    backend: Any
    prompts: list[list[int]]
    max_tokens: int
    seeded: bool = True  # False: requests sampled without a seed (`Unseeded`), as a run samples them

    @classmethod
    def load(
        cls,
        model: str,
        batch: int,
        max_tokens: int,
        threads: int,
        backend: str = "transformers",
        options: dict[str, Any] | None = None,
        seeded: bool = True,
    ) -> BackendAlone:
        """Load the model on the backend registered as `backend`, built with `backend_kwargs(model,
        options)`, with `threads` torch threads (as the inference actor has); warm it up (a vLLM engine
        compiles on its first batch)."""
        import torch

        from unstable_core import plugins

        torch.set_num_threads(threads)
        loaded = plugins.load("backend", backend)(**backend_kwargs(model, options))
        alone = cls(loaded, first_prompts(model, batch), max_tokens, seeded)
        alone.tokens_per_s(seed=-1)
        return alone

    @property
    def parameters(self) -> int:
        """The model's parameter count (tied embeddings once: the LM head's matmul)."""
        return sum(p.numel() for p in self.backend._pool.base_model.parameters())

    @property
    def widths(self) -> tuple[int, int]:
        """(hidden size, MLP width) of the model: the matmul shape of most of its FLOPs."""
        config = self.backend._pool.base_model.config
        return int(config.hidden_size), int(getattr(config, "intermediate_size", 4 * config.hidden_size))

    def tokens_per_s(self, seed: int = 0, prompts: list[list[int]] | None = None) -> float:
        """Generated tokens per second of one batch: the B prompts, or `prompts`."""
        from backend_bench import measure_backend_throughput

        prompts = prompts or self.prompts
        n = len(prompts)
        return measure_backend_throughput(
            self.backend if self.seeded else Unseeded(self.backend),
            prompts,
            self.max_tokens,
            temperature=TEMPERATURE,
            seed=1000 + seed * n,
        )

    def step_matmul_flops(self, batch: int, repeats: int = 5) -> float:
        """fp32 FLOP/s of the model's own Linear layers (LM head included, packed as the backend packs
        them) applied in turn to `batch` rows, as one decode step applies them: every weight read from
        memory once a step, the best of `repeats` steps. What decode at this batch could reach if nothing
        but its matmuls took time."""
        import torch

        model = self.backend._pool.base_model
        layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
        rows = {m.in_features: torch.randn(batch, m.in_features, dtype=m.weight.dtype) for m in layers}
        best = float("inf")
        with torch.inference_mode():
            for _ in range(repeats + 1):  # the first is a warm-up
                started = time.perf_counter()
                for m in layers:
                    m(rows[m.in_features])
                best = min(best, time.perf_counter() - started)
        return 2.0 * batch * sum(m.weight.numel() for m in layers) / best

    def decode_step_s(self, rows: int, steps: int = 12) -> float:
        """Seconds of one decode step of `rows` rows, each a first-turn prompt's length of cached tokens
        (the backend's forward pass and fp32 logits, no sampling; no adapter): the median of `steps` steps."""
        import torch

        from unstable_core.inference.hf.kv_cache import in_place_cache

        backend, device = self.backend, self.backend.device
        sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
        length = len(self.prompts[0])
        cache = in_place_cache(backend._pool.base_model.config, length + steps + 1)
        attention = torch.ones((rows, length), dtype=torch.long, device=device)
        times = []
        with torch.inference_mode():
            prompt = torch.tensor([self.prompts[0]] * rows, device=device)
            positions = torch.arange(length, device=device).expand(rows, -1)
            backend._forward([], prompt, attention, positions, cache, False)  # [] rows: no adapter
            for i in range(steps):
                attention = torch.cat([attention, attention.new_ones((rows, 1))], dim=-1)
                position = torch.full((rows, 1), length + i, device=device)
                sync()
                started = time.perf_counter()
                backend._forward([], prompt[:, -1:], attention, position, cache, False)
                sync()
                times.append(time.perf_counter() - started)
        return statistics.median(times)

    def logprob_gap(self, model: str) -> float:
        """The largest |recorded - recomputed| log-prob over one batch's sampled tokens, recomputed by a
        plain fp32 forward pass of a freshly loaded model (torch's own kernels, as the learner runs)."""
        import torch

        from unstable_core.model_loading import load_causal_lm
        from unstable_core.testing import plain_logprobs

        params = SamplingParams(temperature=TEMPERATURE, max_tokens=self.max_tokens, seed=7)
        outs = self.backend.generate_batch([GenerationRequest(tuple(p), params=params) for p in self.prompts])
        plain = load_causal_lm(model, device="cpu", dtype=torch.float32)
        gap = 0.0
        for prompt, out in zip(self.prompts, outs, strict=True):
            recomputed = plain_logprobs(plain, prompt, out.token_ids, temperature=TEMPERATURE)
            gap = max([gap, *(abs(r - x) for r, x in zip(recomputed, out.logprobs, strict=True))])
        return gap

    def close(self) -> None:
        """Release the model."""
        asyncio.run(self.backend.close())


def matmul_flops(rows: int, inner: int, cols: int, kernel: str = "torch", seconds: float = 0.5) -> float:
    """fp32 FLOP/s of [rows, inner] x [inner, cols] in this process (its torch threads), the best of three
    timings of about `seconds / 3` each: `kernel` "torch" is torch.matmul, "onednn" oneDNN's linear on a
    weight packed once, as the backend's packed layers run it."""
    import torch

    from unstable_core.inference.hf.packed_linear import apply_packed, pack_weight

    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    if kernel == "onednn":
        packed = pack_weight(b.t().contiguous())
        multiply = lambda: apply_packed(a, packed)  # noqa: E731
    else:
        multiply = lambda: torch.matmul(a, b)  # noqa: E731
    multiply()
    started = time.perf_counter()
    multiply()
    reps = max(1, int(seconds / 3 / max(time.perf_counter() - started, 1e-6)))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(reps):
            multiply()
        best = min(best, (time.perf_counter() - started) / reps)
    return 2.0 * rows * inner * cols / best


def best_matmul_flops(rows: int, inner: int, cols: int) -> tuple[float, dict[str, float]]:
    """The machine's fp32 matmul at this shape: the faster kernel's FLOP/s, and each kernel's."""
    from unstable_core.inference.hf.packed_linear import packing_available

    kernels = ("torch", "onednn") if packing_available() else ("torch",)
    each = {k: matmul_flops(rows, inner, cols, kernel=k) for k in kernels}
    return max(each.values()), each


def play_plain_games(turns: int, seed: int = 0) -> int:
    """(d) baseline: whole TextArena TicTacToe games in a plain loop until at least `turns` turns, each
    move a random legal one read from the observation (the instant backend's choice); the turns played."""
    import textarena

    rng = random.Random(seed)
    played = game = 0
    while played < turns:
        env = textarena.make(ENV_ID)
        env.reset(num_players=2, seed=seed + game)
        done = False
        while not done:
            _, observation = env.get_observation()
            done, _ = env.step(instant_backend.choose_move(observation, rng) or "[0]")
            played += 1
        env.close()
        game += 1
    return played


def plain_turns_per_s(turns: int, seed: int = 0) -> float:
    """Turns per second of `play_plain_games`."""
    started = time.perf_counter()
    played = play_plain_games(turns, seed)
    return played / (time.perf_counter() - started)


def play_inprocess_games(
    model: str, games_in_flight: int, turns: int, max_tokens: int, backend: Any = None
) -> int:
    """(d') the game loop alone: `play_game` coroutines in this process on an InstantBackend (`backend`,
    else a new one), no Ray, `games_in_flight` at a time until at least `turns` turns were played; the
    turns played."""
    from unstable_core.errors import UnstableError
    from unstable_core.games.loop import play_game
    from unstable_core.types import GameSpec, PlayerSpec

    own = backend is None
    backend = backend or instant_backend.InstantBackend(model)
    params = SamplingParams(temperature=TEMPERATURE, max_tokens=max_tokens)
    played = started_games = 0

    async def keep_playing() -> None:
        nonlocal played, started_games
        while played < turns:
            idx, started_games = started_games, started_games + 1
            seats = [PlayerSpec(pid, "ckpt-0", True, "default") for pid in (0, 1)]
            spec = GameSpec(game_idx=idx, env_id=ENV_ID, seed=idx, players=seats)
            result = await play_game(
                spec,
                backend.generate,
                backend.tokenizer,
                lora_paths={0: None, 1: None},
                policy_versions={0: 0, 1: 0},
                params=params,
            )
            if result.info.failed:
                raise UnstableError(f"in-process game {idx} failed: {result.info.error}")
            played += result.info.num_turns

    async def play_all() -> None:
        try:
            await asyncio.gather(*(keep_playing() for _ in range(games_in_flight)))
        finally:
            if own:
                await backend.close()

    asyncio.run(play_all())
    return played


def inprocess_turns_per_s(
    model: str, games_in_flight: int, turns: int, max_tokens: int, rounds: int = 1
) -> list[float]:
    """Turns per second of `play_inprocess_games`, `rounds` times on one backend loaded beforehand (its
    tokenizer's loading is no turn's cost), after a warm-up of as many turns."""
    backend = instant_backend.InstantBackend(model)
    rates = []
    try:
        play_inprocess_games(model, games_in_flight, turns, max_tokens, backend)
        for _ in range(rounds):
            started = time.perf_counter()
            played = play_inprocess_games(model, games_in_flight, turns, max_tokens, backend)
            rates.append(played / (time.perf_counter() - started))
    finally:
        asyncio.run(backend.close())
    return rates


@attrs.define
class Row:
    """One line of the report: a measured value against its target."""

    name: str
    value: float
    unit: str
    target: str
    passed: bool | None  # None: no target (a baseline)
    note: str = ""


def print_table(rows: list[Row], title: str) -> None:
    """The report as a rich table: measured value, target, PASS/MISS."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("measure", "value", "target", "verdict", "note"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for r in rows:
        verdict = "" if r.passed is None else "[green]PASS[/green]" if r.passed else "[red]MISS[/red]"
        value = f"{r.value:.1e}" if 0 < abs(r.value) < 0.01 else f"{r.value:,.2f}"
        table.add_row(r.name, f"{value} {r.unit}".strip(), r.target, verdict, r.note)
    Console(width=160).print(table)


@attrs.define
class Sizes:
    """How much to measure (full or --quick)."""

    rounds: int  # (a)-(c) interleaved this many times, (d) repeated: medians damp a shared machine's noise
    window_batches: int  # (b): measured turns per round = window_batches * B
    single_turns: int  # (c): measured turns per round at concurrency 1
    instant_games: int  # (d): games in flight on the instant backend
    instant_turns: int  # (d): measured engine turns per repeat; the plain loop plays as many
    rss_games: int  # (e): games in flight
    rss_turns: int  # (e): turns played, once rss_games are in flight, before reading the peak RSS
    # (e): the instant backend's answer delay; answering at once, games end faster than the collector
    # starts new ones (one per event-loop pass), and fewer than rss_games are ever in flight
    rss_latency_s: float


FULL = Sizes(
    rounds=3,
    window_batches=6,  # two batches measured rounds from 69 to 152 tok/s: a window sees a few game states
    single_turns=4,
    instant_games=128,
    instant_turns=2000,
    rss_games=1024,
    rss_turns=8192,
    rss_latency_s=1.0,
)
QUICK = Sizes(
    rounds=2,
    window_batches=1,
    single_turns=2,
    instant_games=8,
    instant_turns=100,
    rss_games=16,
    rss_turns=64,
    rss_latency_s=0.2,
)


def init_ray() -> None:
    """A local Ray cluster as run.py starts it, whose workers all register the instant backend."""

    import ray
    from ray import cloudpickle

    from unstable_core.runtime.launch.cluster import LOCAL_CPUS

    instant_backend.register_instant_backend()
    # shipped by value: Ray workers cannot import this folder, it is no package
    cloudpickle.register_pickle_by_value(instant_backend)
    if __name__ != "__main__":
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(
        num_cpus=LOCAL_CPUS,
        include_dashboard=False,
        log_to_driver=False,
        namespace="unstable-bench",
        runtime_env={"worker_process_setup_hook": instant_backend.register_instant_backend},
    )


def per_round(xs: list[float]) -> str:
    """A note's list of the values of each round."""
    return "per round: " + ", ".join(f"{x:,.2f}" for x in xs)


def engine_round(engine: Engine, batch: int, sizes: Sizes) -> tuple[float, float]:
    """(b) and (c)'s baseline, one round: the engine's tokens/s with B games in flight, then with 1 game
    (each after a few turns of warm-up)."""
    engine.collect(batch)
    b = engine.window(warmup_turns=batch, turns=sizes.window_batches * batch).tokens_per_s
    engine.collect(1)
    one = engine.window(warmup_turns=1, turns=sizes.single_turns).tokens_per_s
    return b, one


def abc_rows(batch: int, threads: int, a: list[float], b: list[float], one: list[float]) -> list[Row]:
    """Rows (a), (b), (b/a) and (c) from each round's tokens/s: alone, B games, 1 game (medians)."""
    med = statistics.median
    b_over_a = [x / y for x, y in zip(b, a, strict=True)]
    b_over_one = [x / y for x, y in zip(b, one, strict=True)]
    return [
        Row(
            "a) backend alone",
            med(a),
            "tok/s",
            "",
            None,
            f"batch {batch}, {threads} thread(s); {per_round(a)}",
        ),
        Row("b) engine", med(b), "tok/s", "", None, f"{batch} games in flight; {per_round(b)}"),
        Row(
            "b/a) engine / backend", med(b_over_a), "x", ">= 0.85", med(b_over_a) >= 0.85, per_round(b_over_a)
        ),
        Row(
            f"c) {batch} games / 1 game",
            med(b_over_one),
            "x",
            ">= 4",
            med(b_over_one) >= 4.0,
            f"1 game: {med(one):,.2f} tok/s; {per_round(b_over_one)}",
        ),
    ]


def measure_model(engine: Engine, model: str, batch: int, max_tokens: int, sizes: Sizes) -> list[Row]:
    """(a), (b), (c): rounds of [one batch in-process, B games on the engine, 1 game on the engine], so
    that each ratio compares measurements taken moments apart; the rows give the medians over rounds."""
    threads = engine.torch_threads()
    alone = BackendAlone.load(model, batch, max_tokens, threads)
    hidden, width = alone.widths
    a, b, one, step_peak, big_peak, streamed, step_one, step_b = [], [], [], [], [], [], [], []
    kernels: dict[str, list[float]] = {}
    try:
        for r in range(sizes.rounds):
            engine.stop_collecting()  # the in-process batch gets the CPU to itself, as the engine does
            a.append(alone.tokens_per_s(seed=r))
            peak, each = best_matmul_flops(batch, hidden, width)
            step_peak.append(peak)
            for kernel, flops_of in each.items():
                kernels.setdefault(kernel, []).append(flops_of)
            big_peak.append(best_matmul_flops(2048, hidden, width)[0])
            streamed.append(alone.step_matmul_flops(batch))
            step_one.append(alone.decode_step_s(1))
            step_b.append(alone.decode_step_s(batch))
            b_round, one_round = engine_round(engine, batch, sizes)
            b.append(b_round)
            one.append(one_round)
        parameters = alone.parameters
        gap = alone.logprob_gap(model)
    finally:
        alone.close()
    flops = [2.0 * parameters * x for x in a]
    of_peak = [x / y for x, y in zip(flops, step_peak, strict=True)]
    of_streamed = [x / y for x, y in zip(flops, streamed, strict=True)]
    ceiling = [batch * x / y for x, y in zip(step_one, step_b, strict=True)]
    med = statistics.median
    a_row, *engine_rows = abc_rows(batch, threads, a, b, one)
    return [
        a_row,
        Row(
            "a') backend FLOP/s / matmul",
            med(of_peak),
            "x",
            ">= 0.4",
            med(of_peak) >= 0.4,
            f"{med(flops) / 1e9:,.1f} GFLOP/s = 2 x {parameters / 1e6:,.1f}M params x tok/s; fp32 matmul "
            f"[{batch}, {hidden}] x [{hidden}, {width}] {med(step_peak) / 1e9:,.1f} GFLOP/s ("
            + ", ".join(f"{k} {med(v) / 1e9:,.1f}" for k, v in kernels.items())
            + f"; [2048, {hidden}]: {med(big_peak) / 1e9:,.1f}); {per_round(of_peak)}",
        ),
        Row(
            "a'') backend / its matmuls",
            med(of_streamed),
            "x",
            "",
            None,
            f"the model's linear layers at batch {batch}, weights from memory: "
            f"{med(streamed) / 1e9:,.1f} GFLOP/s; {per_round(of_streamed)}",
        ),
        Row(
            "a''') log-prob gap, backend / plain fp32",
            gap,
            "",
            f"<= {PARITY:g}",
            gap <= PARITY,
            f"max |recorded - recomputed| over {batch} x {max_tokens} sampled tokens; "
            f"{alone.backend.packed_layers} packed layers",
        ),
        *engine_rows,
        Row(
            "c') ceiling of c here",
            med(ceiling),
            "x",
            "",
            None,
            f"{batch} x decode step at batch 1 / at batch {batch}: {med(step_one) * 1e3:,.1f} / "
            f"{med(step_b) * 1e3:,.1f} ms ({len(alone.prompts[0])} cached tokens); {per_round(ceiling)}",
        ),
    ]


def measure_instant(engine: Engine, model: str, max_tokens: int, sizes: Sizes) -> list[Row]:
    """(d), (d') on an engine serving the instant backend: medians of repeats."""
    med = statistics.median
    engine.collect(sizes.instant_games)
    fast = [engine.window(warmup_turns=2 * sizes.instant_games, turns=sizes.instant_turns)]
    fast += [engine.window(warmup_turns=0, turns=sizes.instant_turns) for _ in range(sizes.rounds - 1)]
    engine.stop_collecting()  # the in-process loops get the CPU to themselves
    engine_rate = med(w.turns_per_s for w in fast)
    plain = med(plain_turns_per_s(sizes.instant_turns, seed=r) for r in range(sizes.rounds))
    alone = med(
        inprocess_turns_per_s(model, sizes.instant_games, sizes.instant_turns, max_tokens, sizes.rounds)
    )
    ratio = engine_rate / plain
    rows = [
        Row(
            "d) engine / plain loop",
            ratio,
            "x",
            ">= 0.25",
            ratio >= 0.25,
            f"{engine_rate:,.0f} vs {plain:,.0f} turns/s, {sizes.instant_games} games in flight",
        ),
        Row(
            "d') game loop in-process",
            alone,
            "turns/s",
            ">= 5,000",
            alone >= 5000,
            f"play_game on the instant backend, no Ray, {sizes.instant_games} games in flight; "
            f"{alone / plain:.2f} x the plain loop",
        ),
        Row(
            "d'') engine / game loop",
            engine_rate / alone,
            "x",
            ">= 0.5",
            engine_rate / alone >= 0.5,
            f"{engine_rate:,.0f} turns/s through Ray vs {alone:,.0f} in-process",
        ),
    ]
    return rows


def measure_memory(engine: Engine, sizes: Sizes) -> Row:
    """(e) the collector's peak RSS once `rss_games` games were in flight and played `rss_turns` turns."""
    engine.collect(sizes.rss_games)
    engine.fill(sizes.rss_games)
    full = engine.window(warmup_turns=0, turns=sizes.rss_turns)
    rss = full.end["peak_rss_bytes"] / GiB
    note = (
        f"{full.end['peak_in_flight']:.0f} games in flight at most, {full.turns} turns after that; "
        f"answers after {sizes.rss_latency_s:g} s"
    )
    return Row("e) collector peak RSS", rss, "GiB", "<= 1 GiB", rss <= 1.0, note)


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


def warn_failed(failed: float, say: Callable[[str], None]) -> None:
    """Say how many games failed during the measurements, if any did."""
    if failed:
        say(f"warning: {failed:.0f} games failed during the measurements (see the collector's log)")


def run(
    model: str, batch: int, max_tokens: int, sizes: Sizes, say: Callable[[str], None] = print
) -> list[Row]:
    """Measure (a) to (e) and return the report's rows (Ray is started and shut down here)."""
    with bench_cluster() as tmp:
        say(f"(a)-(c) {model}: {sizes.rounds} rounds of 1 batch alone, {batch} games, 1 game ...")
        engine = Engine.start("transformers", model, f"{tmp}/model", max_tokens)
        rows = measure_model(engine, model, batch, max_tokens, sizes)
        failed = engine.snapshot()["failed"]
        engine.kill()
        say(f"(d) instant backend, {sizes.instant_games} games in flight; the plain loops ...")
        engine = Engine.start(instant_backend.BACKEND_NAME, model, f"{tmp}/instant", max_tokens)
        rows += measure_instant(engine, model, max_tokens, sizes)
        failed += engine.snapshot()["failed"]
        engine.kill()
        say(f"(e) collector memory, {sizes.rss_games} games in flight ...")
        latency = {"latency_s": sizes.rss_latency_s}
        engine = Engine.start(
            instant_backend.BACKEND_NAME, model, f"{tmp}/memory", max_tokens, backend_options=latency
        )
        rows.append(measure_memory(engine, sizes))
        failed += engine.snapshot()["failed"]
        engine.kill()
    warn_failed(failed, say)
    return rows


def check_vllm() -> None:
    """UnstableError, naming the fix, unless vLLM's CPU build is installed (it is imported by the backend)."""
    from unstable_core.errors import UnstableError
    from unstable_core.inference.vllm.backend import VLLM_MISSING, vllm_platform

    platform = vllm_platform()
    if platform is None:
        raise UnstableError(VLLM_MISSING)
    if platform != "cpu":
        raise UnstableError(
            "--backend vllm compares the backends on the CPU, and the installed vLLM is its CUDA build "
            "(benchmarks/gpu_smoke.py is the GPU's script)"
        )


def vllm_options(model: str, quick: bool) -> dict[str, Any]:
    """VLLMBackend's options on the CPU beside the backends already loaded: a KV cache planned from the
    memory free now for two engines (the inference actor's and the one alone), room for 64 sequences at
    most; with `quick`, no compilation (eager: minutes saved on a tiny model)."""
    from unstable_core.inference.vllm.memory import plan_kv_cache
    from unstable_core.model_loading import hf_model_folder

    plan = plan_kv_cache(
        hf_model_folder(model),
        dtype_bytes=4,  # fp32, the learner's dtype on a CPU, which the backend gives vLLM
        max_batch_size=max(SWEEP),
        max_model_len=VLLM_KV_TOKENS,  # the cache a batch of 64 turns uses, not 64 x 4,096 (14 GB)
        engines=2,
        learner_on_cpu=False,
    )
    options: dict[str, Any] = {"device": "cpu", "kv_cache_memory_bytes": plan.kv_cache_bytes}
    if quick:
        options["engine_kwargs"] = {"enforce_eager": True}
    return options


@attrs.define
class Contender:
    """One backend of --backend vllm's comparison: an engine on its inference actor and the backend alone
    in this process (taking batches of up to 64), and what the rounds measured of each."""

    name: str
    engine: Engine
    threads: int
    alone: BackendAlone | None = None
    a: list[float] = attrs.Factory(list)
    b: list[float] = attrs.Factory(list)
    one: list[float] = attrs.Factory(list)
    sweep: dict[int, list[float]] = attrs.Factory(dict)  # batch size -> tokens/s alone, per round

    @classmethod
    def start(
        cls,
        name: str,
        model: str,
        run_dir: str,
        batch: int,
        max_tokens: int,
        options: dict[str, Any],
        prompts: list[list[int]],
    ) -> Contender:
        """Start the engine and load the backend alone; warm both up (a vLLM engine compiles on its first
        batch): the engine plays B turns, the backend alone runs a batch of B and of each SWEEP size."""
        engine = Engine.start(name, model, run_dir, max_tokens, backend_options=options)
        contender = cls(name, engine, engine.torch_threads())
        try:
            engine.collect(batch)
            engine.window(warmup_turns=0, turns=batch)
            engine.stop_collecting()
            alone_options = {**options, "max_batch_size": max(SWEEP)}
            contender.alone = BackendAlone.load(  # unseeded, as a run samples: see Unseeded
                model, batch, max_tokens, contender.threads, name, alone_options, seeded=False
            )
            for n in SWEEP:
                contender.alone.tokens_per_s(seed=-1, prompts=prompts[:n])
        except BaseException:
            contender.close()
            raise
        return contender

    def measure_round(self, r: int, batch: int, sizes: Sizes, prompts: list[list[int]]) -> None:
        """One round: the backend alone (B prompts, then each SWEEP size), then B games and 1 game on the
        engine, which is stopped afterwards: the next measurement has the CPU to itself."""
        assert self.alone is not None
        self.engine.stop_collecting()
        self.a.append(self.alone.tokens_per_s(seed=r))
        for n in SWEEP:
            self.sweep.setdefault(n, []).append(self.alone.tokens_per_s(seed=r, prompts=prompts[:n]))
        b, one = engine_round(self.engine, batch, sizes)
        self.engine.stop_collecting()
        self.b.append(b)
        self.one.append(one)

    def rows(self, batch: int) -> list[Row]:
        """(a), (b), (b/a), (c) and the backend alone at each SWEEP size (medians over rounds)."""
        rows = abc_rows(batch, self.threads, self.a, self.b, self.one)
        for n, xs in self.sweep.items():
            rows.append(Row(f"a) at batch {n}", statistics.median(xs), "tok/s", "", None, per_round(xs)))
        return rows

    def figures(self) -> list[float]:
        """The comparison's columns: a, b (tok/s), c (x), then tok/s alone at each SWEEP size."""
        med = statistics.median
        c = [x / y for x, y in zip(self.b, self.one, strict=True)]
        return [med(self.a), med(self.b), med(c), *(med(self.sweep[n]) for n in SWEEP)]

    def close(self) -> None:
        """Release the backend alone and end the engine's actors."""
        if self.alone is not None:
            self.alone.close()
            self.alone = None
        self.engine.kill()


def compare(
    model: str,
    batch: int,
    max_tokens: int,
    sizes: Sizes,
    quick: bool = False,
    say: Callable[[str], None] = print,
) -> list[Contender]:
    """--backend vllm: each of BACKENDS started (vLLM's KV cache planned beside the transformers engines),
    then `sizes.rounds` rounds, each measuring every backend in turn; the measured contenders."""
    check_vllm()
    contenders: list[Contender] = []
    with bench_cluster() as tmp:
        try:
            prompts = first_prompts(model, max(SWEEP))
            for name in BACKENDS:
                say(f"{name}: starting the engine and the backend alone, warming both up ...")
                options = vllm_options(model, quick) if name == "vllm" else {}
                contender = Contender.start(name, model, f"{tmp}/{name}", batch, max_tokens, options, prompts)
                contenders.append(contender)
            say(
                f"(a)-(c) {model}: {sizes.rounds} rounds of, for each backend, 1 batch alone (of {batch}, "
                f"then {', '.join(map(str, SWEEP))}), {batch} games, 1 game ..."
            )
            for r in range(sizes.rounds):
                for contender in contenders:
                    contender.measure_round(r, batch, sizes, prompts)
            failed = sum(c.engine.snapshot()["failed"] for c in contenders)
        finally:
            for contender in contenders:
                contender.close()
    warn_failed(failed, say)
    return contenders


def print_comparison(contenders: list[Contender], batch: int, title: str) -> None:
    """One line per backend (a, b, c, tokens/s alone at each SWEEP size), and the second over the first."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    headers = ["a) alone tok/s", "b) engine tok/s", f"c) {batch} / 1 game"]
    headers += [f"tok/s at {n}" for n in SWEEP]
    table.add_column("backend")
    for header in headers:
        table.add_column(header, justify="right")
    figures = {c.name: c.figures() for c in contenders}
    for name, values in figures.items():
        table.add_row(name, *(f"{v:,.2f}" for v in values))
    first, second = list(figures)[:2]
    ratios = [y / x for x, y in zip(figures[first], figures[second], strict=True)]
    table.add_row(f"{second} / {first}", *(f"{v:,.2f} x" for v in ratios))
    Console(width=160).print(table)


def main(argv: list[str] | None = None) -> None:
    """Parse the options, measure, print the table(s)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        help="alias, hub id or folder (default: smollm2-135m; with --backend vllm --quick, a tiny random "
        f"model of hidden size {TINY_VLLM_HIDDEN})",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="transformers",
        help="vllm: (a)-(c) and tokens/s alone at batch 8, 32, 64 of both backends, and their comparison",
    )
    parser.add_argument("--batch", type=int, default=8, help="B: prompts per batch, games in flight")
    parser.add_argument("--max-tokens", type=int, default=32, help="new tokens per turn")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    args = parser.parse_args(argv)
    from unstable_core.errors import UnstableError

    if args.batch < 1 or args.max_tokens < 1:
        raise SystemExit("error: --batch and --max-tokens must be >= 1")
    sizes = QUICK if args.quick else FULL
    quick = " (quick)" if args.quick else ""
    with tempfile.TemporaryDirectory(prefix="bench-rollout-model-") as folder:
        try:
            model = args.model or default_model(args.backend, args.quick, folder)
            if args.backend == "transformers":
                rows = run(model, args.batch, args.max_tokens, sizes)
            else:
                contenders = compare(model, args.batch, args.max_tokens, sizes, args.quick)
        except UnstableError as exc:
            raise SystemExit(f"error: {exc}") from None
    name = args.model or (f"a tiny random model (hidden {TINY_VLLM_HIDDEN})" if model == folder else model)
    title = f"{name}, B={args.batch}, {args.max_tokens} tokens/turn{quick}"
    if args.backend == "transformers":
        print_table(rows, f"rollout benchmark: {title}")
        return
    for contender in contenders:
        print_table(contender.rows(args.batch), f"rollout benchmark, {contender.name} backend: {title}")
    print_comparison(contenders, args.batch, f"rollout benchmark, backends compared: {title}")


def default_model(backend: str, quick: bool, folder: str) -> str:
    """The embedded smollm2-135m; for --backend vllm --quick, a tiny random model written to `folder`."""
    if backend == "vllm" and quick:
        from unstable_core.testing import make_tiny_model

        make_tiny_model(folder, hidden_size=TINY_VLLM_HIDDEN)
        return folder
    return "smollm2-135m"


if __name__ == "__main__":
    main()
