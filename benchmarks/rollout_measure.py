"""The rollout benchmark's measurements (a) to (e) on the transformers backend, and the sizes they take."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import attrs
import instant_backend
from rollout_alone import BackendAlone, best_matmul_flops
from rollout_engine import Engine, bench_cluster
from rollout_games import inprocess_turns_per_s, plain_turns_per_s
from rollout_report import Row, per_round

PARITY = 1e-4  # a'''): the largest log-prob gap the learner's own tests allow an on-policy token
GiB = 1024**3


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
QUICK = Sizes(  # a smoke test: every measurement once, on the smallest sizes
    rounds=1,
    window_batches=1,
    single_turns=2,
    instant_games=8,
    instant_turns=100,
    rss_games=16,
    rss_turns=64,
    rss_latency_s=0.2,
)


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
