"""The rollout benchmark's --backend vllm: (a) to (c) of each backend, and their comparison."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import attrs
from rollout_alone import BackendAlone, first_prompts
from rollout_engine import Engine, bench_cluster
from rollout_measure import Sizes, abc_rows, engine_round, warn_failed
from rollout_report import Row, per_round

VLLM_KV_TOKENS = 1024  # per sequence in vLLM's KV cache plan: a turn's prompt and answer fit it
BACKENDS = ("transformers", "vllm")  # --backend vllm measures both, rounds in this order
SWEEP = (8, 32, 64)  # --backend vllm: each backend alone, one batch of this many prompts


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
