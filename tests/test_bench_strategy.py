"""benchmarks/strategy.py's report: the probes' first-against-last test and the games' Fisher tests, on
figures whose answers are known (no training: that is the benchmark's own, hour-long job)."""

from __future__ import annotations

import json
import math

import pytest

from unstable_core.quantiles import t_quantile
from unstable_core.report.stats import fisher_exact, format_p


@pytest.fixture(scope="module")
def strategy(import_benchmark):
    return import_benchmark("strategy")


def figure(value, half, n=32):
    """A probe figure as summary.json holds it: mean with its 95% t interval over n positions."""
    return {"value": value, "low": value - half, "high": value + half, "n": n, "exact": False}


def test_an_exact_figure_needs_no_test_and_a_sampled_one_gets_a_z_test(strategy):
    exact = {"value": 0.36, "low": 0.36, "high": 0.36, "n": 12, "exact": True}
    assert strategy.change_p(exact, dict(exact, value=0.12)) is None
    se = 0.05 / t_quantile(31)  # a half-width of 0.05 at n = 32
    expected = math.erfc(0.1 / math.hypot(se, se) / math.sqrt(2))
    assert strategy.change_p(figure(0.1, 0.05), figure(0.2, 0.05)) == pytest.approx(expected)
    assert strategy.change_p(figure(0.1, 0.05), figure(0.1, 0.05)) == pytest.approx(1.0)
    assert strategy.change_p(figure(0.1, 0.05), figure(0.9, 0.05)) < 1e-10


def test_the_report_compares_first_with_last_and_base_with_the_checkpoint(strategy):
    probes = {
        "base": {"t": {"figures": {"win_mass": figure(0.1, 0.03), "expl": {"value": 0.36, "exact": True}}}},
        "ckpt-10": {
            "t": {"figures": {"win_mass": figure(0.3, 0.05), "expl": {"value": 0.30, "exact": True}}}
        },
        "ckpt-20": {
            "t": {"figures": {"win_mass": figure(0.6, 0.05), "expl": {"value": 0.20, "exact": True}}}
        },
    }
    score = {"rate": 0.5, "lo": 0.4, "hi": 0.6, "k": 64, "n": 128}
    rows = [
        {"model": "base", "opponent": "heuristic", "games": 128, "failed": 0, "wins": 2, "draws": 10,
         "losses": 116, "score": score, "mean_reward": None},
        {"model": "ckpt-20", "opponent": "heuristic", "games": 128, "failed": 0, "wins": 20, "draws": 40,
         "losses": 68, "score": score, "mean_reward": -0.4},
    ]  # fmt: skip
    lines = strategy.report(probes, rows, wall_s=1800)
    text = "\n".join(lines)
    assert "| ckpt-10 | 0.300 | 0.300 [0.250, 0.350] |" in text
    assert "- t expl: base 0.360 -> ckpt-20 0.200 (exact, no test needed)" in text
    p = strategy.change_p(figure(0.1, 0.03), figure(0.6, 0.05))
    assert (
        f"- t win_mass: base 0.100 [0.070, 0.130] -> ckpt-20 0.600 [0.550, 0.650] (z-test p = {format_p(p)})"
        in text
    )
    assert "| base | heuristic | 128 | 2/10/116 |" in text and "| - |" in text
    assert f"wins base 2/128 -> ckpt-20 20/128 (Fisher p = {format_p(fisher_exact(2, 128, 20, 128))})" in text
    assert f"non-losses 12 -> 60 (p = {format_p(fisher_exact(12, 128, 60, 128))})" in text
    assert lines[-1] == "- training wall time: 30.0 min"


def test_the_probes_per_checkpoint_are_drawn_in_step_order(strategy, tmp_path):
    from unstable_core.report.plots import plot_probes

    exact = {"value": 0.36, "low": 0.36, "high": 0.36, "n": 12, "exact": True}
    probes = {
        "ckpt-20": {"t": {"probe": "t", "env_id": "E-v0", "figures": {"win_mass": figure(0.6, 0.05)}}},
        "smollm2-135m": {"t": {"probe": "t", "env_id": "E-v0", "figures": {"win_mass": figure(0.1, 0.03)}}},
        "ckpt-5": {"t": {"probe": "t", "env_id": "E-v0", "figures": {"win_mass": exact}}},
    }
    records = strategy.probe_records(probes)
    assert [r["step"] for r in records] == [0, 5, 20]
    assert records[1]["figures"]["win_mass"] == exact
    picture = plot_probes(records, tmp_path / "strategy.png", "t")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no probe figure"):
        plot_probes([], tmp_path / "none.png")


def test_a_run_that_is_not_there_ends_in_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "strategy.py"
    result = subprocess.run(
        [sys.executable, str(script), "kuhn", "--run", str(tmp_path / "nonexistent")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "is not a run directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_branching_cost_is_read_from_the_runs_games(strategy, tmp_path):
    def step(cost=None, scripted=False):
        info = {"finish_reason": "scripted" if scripted else "stop"}
        return {"step_info": {**info, "legal": {"cost": cost}} if cost else info}

    games = [  # a model seat against a scripted one; two branched states, one of them an old run's
        {"trajectories": [{"steps": [step({"turns": 3, "generated": 1, "seconds": 2.0}), step()]},
                          {"steps": [step(scripted=True), step(scripted=True)]}]},
        {"trajectories": [{"steps": [step({"turns": 6, "seconds": 1.0})]}]},
    ]  # fmt: skip
    (tmp_path / "games").mkdir()
    (tmp_path / "games" / "games.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    rows = [{"step": 1}, {"learner/time/update_s": 10.0}, {"learner/time/update_s": 20.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cost = strategy.branching_cost(tmp_path)
    assert (cost["states"], cost["updates"]) == (2, 2)
    assert cost["turns_per_state"] == 4.5 and cost["generated_per_state"] == 3.5  # the old run's: all 6
    assert cost["branch_seconds_per_update"] == 1.5 and cost["learner_seconds_per_update"] == 15
    assert cost["inference_share"] == pytest.approx(7 / (7 + 3))  # 3 model turns in the games
    assert "3.5 of them generated" in strategy.branching_lines(cost)[0]
    assert strategy.branching_lines(None) == []  # no branching: no line
    (tmp_path / "games" / "games.jsonl").write_text(
        json.dumps({"trajectories": [{"steps": [step()]}]}) + "\n"
    )
    assert strategy.branching_cost(tmp_path) is None
