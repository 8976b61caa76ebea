"""benchmarks/kuhn_tabular.py: the recipe's signal on a table of logits learns Kuhn Poker (exploitability
from uniform's 0.458 to below 0.2 in 55 updates), a magnet that dominates keeps it near uniform, and the
hand's rules and payoffs are Kuhn's."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyspiel")


@pytest.fixture(scope="module")
def tabular(import_benchmark):
    return import_benchmark("kuhn_tabular")


def test_payoffs_are_kuhns(tabular):
    assert tabular.payoff("pp", (2, 0)) == 1 and tabular.payoff("pp", (0, 2)) == -1
    assert tabular.payoff("bp", (0, 2)) == 1  # the opponent folded
    assert tabular.payoff("pbp", (2, 0)) == -1  # player 0 folded
    assert tabular.payoff("bb", (1, 2)) == -2 and tabular.payoff("pbb", (2, 1)) == 2


def test_a_uniform_table_is_uniform_plays_exploitability(tabular):
    assert tabular.Table().exploitability() == pytest.approx(0.4583, abs=1e-3)


def test_branched_values_are_the_movers(tabular):
    table = tabular.Table()
    table.logits["2b"] = [-30.0, 30.0]  # K facing a bet always calls
    states = tabular.visited_states(table, 64, 1, random.Random(0))
    for key, values in states:
        if key == "0":  # J opens: a bet is called by K (-2) or Q/J's half calls; a check is never +2
            assert max(values) <= 1
        if key == "2b":  # K facing a bet: calling wins 2, folding loses 1
            assert values == [-1.0, 2.0]


def test_the_signal_learns_on_a_table_and_a_dominant_magnet_holds_it_at_uniform(tabular):
    learned = tabular.run_row((1.0, 0.2, 1.0, 1))
    assert learned[-1] < 0.2  # uniform play: 0.458
    assert tabular.run_row((1.0, 0.2, 1.0, 1), schedule="linear")[-1] < 0.2  # the step falls to 1/55
    held = tabular.run_row((1.0, 20.0, 1.0, 1))
    assert held[-1] > 0.35


def test_bad_options_end_in_one_line(tabular, capsys):
    with pytest.raises(SystemExit) as exit_:
        tabular.main(["--seeds", "0"])
    assert exit_.value.code == 2
    assert "must be >= 1" in capsys.readouterr().err


def test_a_nash_policy_wins_at_most_half_the_hands_against_uniform_play(tabular):
    """Why the recipe's two targets pull apart: Nash wins chips from random play, not hands."""
    from unstable_core.games.players.kuhn_nash import aggressive_probability

    for alpha, won in ((0.0, 0.4583), (1 / 3, 0.5)):
        nash = lambda key, a=alpha: aggressive_probability(int(key[0]), key[1:], a)  # noqa: E731
        assert tabular.hands_won_against_uniform(nash) == pytest.approx(won, abs=1e-4)
    assert tabular.hands_won_against_uniform(lambda key: 0.5) == pytest.approx(0.5)
    # bet and call with every card: exploitability 1/3, yet it wins 11 hands in 16
    assert tabular.hands_won_against_uniform(lambda key: 1.0) == pytest.approx(0.6875)
