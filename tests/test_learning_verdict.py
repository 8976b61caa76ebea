"""The sentence a run's summary opens with (`learning_verdict`), from rates per checkpoint built by hand:
learning, getting worse, no significant change, and no test with its reason; the benchmark says the same."""

import json
import sys
from pathlib import Path

import pytest

from unstable_core.io import dumps_json
from unstable_core.report.checkpoint_rates import VersionRates
from unstable_core.report.learning_verdict import (
    LEARNING,
    NO_CHANGE,
    NO_TEST,
    SIGNIFICANCE,
    WORSE,
    learning_verdict,
    run_verdict,
)
from unstable_core.report.stats import clustered_two_proportion_test, format_p, two_proportion_test

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def version(v, invalid=0, turns=0, wins=None, formatted=None):
    """Counts of ckpt-v: `turns` seats of one turn, the first `invalid` of them invalid (and the first
    `formatted` formatted, default none); `wins` = (W, n) against base."""
    formatted = formatted or 0
    seats = [(1, int(i < invalid), int(i < formatted)) for i in range(turns)]
    r = VersionRates(versions=[v], seats=seats)
    if wins is not None:
        r.wins["base"], r.games["base"], r.draws["base"] = wins[0], wins[1], 0
    return r


def invalid_p(first: int, last: int, n: int = 40) -> str:
    """The p-value of `first` of n invalid turns against `last` of n, each turn its own game seat."""
    test = clustered_two_proportion_test(
        [(int(i < first), 1) for i in range(n)], [(int(i < last), 1) for i in range(n)]
    )
    return format_p(test.p_value)


def test_fewer_invalid_moves_read_as_learning():
    rates = {v: version(v, invalid=16 if v < 2 else 2, turns=20) for v in range(8)}  # pooled: 32/40 -> 4/40
    verdict = learning_verdict(rates)
    assert verdict.status == LEARNING
    assert (
        verdict.sentence == f"invalid moves per turn 0.80 -> 0.10 (p = {invalid_p(32, 4)} < 0.01): learning"
    )


def test_more_invalid_moves_read_as_getting_worse_not_learning():
    rates = {v: version(v, invalid=2 if v < 2 else 16, turns=20) for v in range(8)}
    verdict = learning_verdict(rates)
    assert verdict.status == WORSE
    assert verdict.sentence == (
        f"invalid moves per turn 0.10 -> 0.80 (p = {invalid_p(4, 32)} < 0.01): getting worse"
    )
    assert "learning" not in verdict.sentence


def test_a_falling_win_rate_reads_as_getting_worse():
    rates = {v: version(v, invalid=10, turns=20, wins=(19, 20) if v < 2 else (4, 20)) for v in range(8)}
    verdict = learning_verdict(rates)
    from unstable_core.report.stats import Rate

    p = format_p(two_proportion_test(Rate(38, 40), Rate(8, 40)).p_value)
    assert verdict.status == WORSE
    assert verdict.sentence == f"win rate vs base 0.95 -> 0.20 (p = {p} < 0.01): getting worse"


def test_a_significant_change_the_other_way_is_told_after_but():
    rates = {
        v: version(v, invalid=18 if v < 2 else 1, turns=20, wins=(19, 20) if v < 2 else (4, 20))
        for v in range(8)
    }
    verdict = learning_verdict(rates)
    assert verdict.status == LEARNING
    assert verdict.sentence.startswith("invalid moves per turn 0.90 -> 0.05 (p = ")
    assert "; but win rate vs base 0.95 -> 0.20 (p = " in verdict.sentence
    assert verdict.sentence.endswith("): getting worse")


def test_no_significant_change_names_the_closest_rate_and_the_threshold():
    rates = {
        v: version(v, invalid=10 if v < 2 else 8, turns=20, wins=(11, 20) if v < 2 else (12, 20))
        for v in range(8)
    }
    verdict = learning_verdict(rates)
    tests = {c.name: c.test for c in verdict.changes if c.test}
    closest = min(("invalid_move_rate", "win_rate_vs_base"), key=lambda n: tests[n].p_value)
    assert closest == "invalid_move_rate" and tests[closest].p_value > SIGNIFICANCE
    assert verdict.status == NO_CHANGE
    assert verdict.sentence == (
        "no rate changed significantly at p < 0.01 "
        f"(closest: invalid moves per turn 0.50 -> 0.40, p = {format_p(tests[closest].p_value)})"
    )


def test_no_test_says_why_and_never_prints_nan():
    """The tiny model of the end-to-end runs: every move invalid, none formatted. Before: `z = nan, p = 1`."""
    rates = {v: version(v, invalid=4, turns=4) for v in range(4)}
    verdict = learning_verdict(rates)
    assert verdict.status == NO_TEST
    assert verdict.sentence == (
        "no test: invalid moves per turn: the same outcome (1.00) in all 8 turns; "
        "formatted answers per turn: the same outcome (0.00) in all 8 turns"
    )
    text = "\n".join([verdict.sentence, *verdict.lines()])
    assert "nan" not in text.lower()
    assert "  invalid moves per turn, ckpt 0 vs ckpt 3: 1.000 [0.510, 1.000] (n=4) -> 1.000 [0.510, 1.000] (n=4): " \
        "no test, the same outcome (1.00) in all 8 turns" in verdict.lines()  # fmt: skip
    assert json.loads(dumps_json(verdict.to_dict()))["rates"][0]["why_untested"].startswith(
        "the same outcome"
    )


def test_no_test_with_one_checkpoint_or_no_game():
    one = learning_verdict({0: version(0, invalid=1, turns=3)})
    assert one.sentence == (
        "no test: invalid moves per turn and formatted answers per turn: only ckpt 0 has turns "
        "(the quarters need two checkpoints)"
    )
    assert learning_verdict({}).sentence == "no test: no game finished"


def test_untested_rates_are_named_beside_a_tested_one():
    """The evaluation of ckpt-4 only: no win rate test, said on its line; the sentence is the invalid rate's."""
    rates = {v: version(v, invalid=16 if v < 2 else 2, turns=20) for v in range(8)}
    rates[8] = version(8, wins=(3, 4))
    verdict = learning_verdict(rates)
    assert verdict.status == LEARNING
    assert verdict.lines()[0] == (
        "first vs last quarter of the checkpoints with data for each rate, significant at p < 0.01:"
    )
    assert verdict.lines()[-1] == (
        "  win rate vs base: no test, only ckpt 8 has games against base (the quarters need two checkpoints)"
    )
    record = verdict.to_dict()
    assert record["significance"] == 0.01 and record["status"] == "learning"
    assert [r["verdict"] for r in record["rates"]] == ["learning", "no test", "no test"]


@pytest.mark.parametrize(
    ("p", "text"), [(2e-5, "2e-5"), (4.9e-10, "4.9e-10"), (0.41, "0.41"), (0.0036, "0.0036"), (1.0, "1")]
)
def test_p_values_read_as_people_write_them(p, text):
    assert format_p(p) == text


def test_close_rates_get_the_digits_that_tell_them_apart():
    rates = {v: version(v, invalid=2 if v < 2 else 1, turns=500) for v in range(8)}  # 4/1000 -> 2/1000
    assert "(closest: invalid moves per turn 0.004 -> 0.002, p = " in learning_verdict(rates).sentence


def test_the_learning_benchmark_says_it_the_same_way(tmp_path, monkeypatch, capsys):
    games = []
    for v in range(4):  # invalid moves: 9 in 10 at ckpt-0, 1 in 10 at ckpt-3
        for i in range(10):
            step = {"policy_version": v, "invalid_move": i < (9 if v == 0 else 1), "format_ok": False}
            info = {"models": {"0": f"ckpt-{v}", "1": f"ckpt-{v}"}, "final_rewards": {"0": 0, "1": 0}}
            games.append({"info": info, "trajectories": [{"collect_data": True, "steps": [step]}]})
    (tmp_path / "games").mkdir()
    (tmp_path / "games" / "games.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    import learning

    try:
        data = learning.report(tmp_path, "hand-made run")
    finally:
        sys.modules.pop("learning", None)
    sentence = run_verdict(tmp_path).sentence
    assert sentence.startswith("invalid moves per turn 0.90 -> 0.10 (p = ") and sentence.endswith("learning")
    assert data["summary"] == sentence and data["learning"]["sentence"] == sentence
    out = capsys.readouterr().out
    assert f"result: {sentence}" in out.splitlines() and "nan" not in out
    assert json.loads((tmp_path / "benchmark.json").read_text())["summary"] == sentence
