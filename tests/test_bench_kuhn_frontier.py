"""benchmarks/kuhn_frontier.py: the exact frontier of hands won against random play under an exploitability
bound, its LP's policies checked by OpenSpiel, at the points known in closed form."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspiel")
pytest.importorskip("scipy")


@pytest.fixture(scope="module")
def frontier(import_benchmark):
    return import_benchmark("kuhn_frontier")


def test_the_frontier_at_known_points(frontier):
    form = frontier.SequenceForm()
    best, bet = frontier.frontier(form, 1 / 3)
    assert best == pytest.approx(11 / 16)  # betting and calling with every card, exploitability 1/3
    assert frontier.checked(bet) == pytest.approx((1 / 3, 11 / 16), abs=1e-6)
    best, bet = frontier.frontier(form, 0.15)
    assert best == pytest.approx(227 / 360)  # above the local search's 0.620, below 0.69
    exploitability, won = frontier.checked(bet)
    assert exploitability == pytest.approx(0.15, abs=1e-6) and won == pytest.approx(best, abs=1e-9)
    nash, _ = frontier.frontier(form, 0.0)
    assert nash == pytest.approx(1 / 2)  # the Nash policy that wins the most hands (alpha 1/3)


def test_the_lower_bound_and_a_bad_bound(frontier, capsys):
    assert frontier.wilson_lower(157, 256) > 0.55 > frontier.wilson_lower(156, 256)
    with pytest.raises(SystemExit):
        frontier.main(["--eps", "2"])
    assert "--eps in [0, 1]" in capsys.readouterr().err
