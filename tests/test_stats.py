"""Wilson intervals and the two-proportion z-test against published and hand-computed values."""

import math

import pytest

from unstable_core.report.stats import Rate, fisher_exact, two_proportion_test, wilson_interval


def test_wilson_interval_known_values():
    # Newcombe (1998), Table I: 0/10 -> [0, 0.2775]; 10/10 -> [0.7225, 1]; 5/10 -> [0.2366, 0.7634]
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_rate_prints_count_and_interval():
    assert str(Rate(1, 2)) == "0.500 [0.095, 0.905] (n=2)"
    assert str(Rate(0, 0)) == "- (n=0)"
    assert math.isnan(Rate(0, 0).rate)


def test_two_proportion_test_by_hand():
    # 0.71 of 148 vs 0.43 of 63 (the project's first measurement): pooled p = (105 + 27) / 211
    first, second = Rate(105, 148), Rate(27, 63)
    pooled = 132 / 211
    z = (27 / 63 - 105 / 148) / math.sqrt(pooled * (1 - pooled) * (1 / 148 + 1 / 63))
    cmp = two_proportion_test(first, second)
    assert cmp.z == pytest.approx(z) and cmp.z == pytest.approx(-3.8, abs=0.15)
    assert cmp.p_value == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))
    assert cmp.p_value < 0.001


def test_two_proportion_test_without_spread_or_data():
    assert two_proportion_test(Rate(0, 10), Rate(0, 20)).p_value == 1.0
    assert two_proportion_test(Rate(0, 0), Rate(3, 20)).p_value == 1.0
    assert two_proportion_test(Rate(5, 10), Rate(5, 10)).z == 0.0


def test_fisher_exact_known_values():
    # Fisher's tea tasting: 3 of 4 against 1 of 4 -> two-sided p = 34/70
    assert fisher_exact(3, 4, 1, 4) == pytest.approx(34 / 70)
    # 0 of 10 against 10 of 10: only the two extreme tables, each 1 / C(20, 10)
    assert fisher_exact(0, 10, 10, 10) == pytest.approx(2 / math.comb(20, 10))
    assert fisher_exact(2, 5, 2, 5) == pytest.approx(1.0)


def test_small_counts_use_fisher_not_the_normal():
    # a run summary's last version had 3 steps: 1 formatted of 55 -> 1 of 3 gave z = 2.91, "p = 0.0036"
    cmp = two_proportion_test(Rate(1, 55), Rate(1, 3))
    assert cmp.z == pytest.approx(2.91, abs=0.01)
    assert cmp.method == "fisher"
    # by hand: 2 successes in 58, 3 drawn in the second group; tables x = 0, 1, 2 of the first group's 55
    probs = {x: math.comb(55, x) * math.comb(3, 2 - x) / math.comb(58, 2) for x in (0, 1, 2)}
    assert cmp.p_value == pytest.approx(sum(p for p in probs.values() if p <= probs[1] * (1 + 1e-9)))
    assert cmp.p_value > 0.05 and "Fisher" in cmp.p_text
    # half counts (draws) cannot go through Fisher: no p-value is claimed
    halves = two_proportion_test(Rate(7.5, 9), Rate(2.5, 3))
    assert halves.method == "none" and halves.p_text == "too few to test"
    # large counts keep the z-test
    assert two_proportion_test(Rate(105, 148), Rate(27, 63)).method == "z"


def test_clustered_test_by_hand():
    """Seats of 2 moves: first 15 of 30 (clusters 1, 0, 2 five times), second 5 of 40 (0, 0, 1, 0 five
    times). V1 = 15/14 * 10 / 30^2, V2 = 20/19 * 3.75 / 40^2, z = (0.125 - 0.5) / sqrt(V1 + V2)."""
    from unstable_core.report.stats import clustered_two_proportion_test

    first = [(1, 2), (0, 2), (2, 2)] * 5
    second = [(0, 2), (0, 2), (1, 2), (0, 2)] * 5
    cmp = clustered_two_proportion_test(first, second)
    assert cmp.method == "cluster-z" and (cmp.first.k, cmp.first.n, cmp.second.k, cmp.second.n) == (
        15,
        30,
        5,
        40,
    )
    assert cmp.z == pytest.approx(-3.12805, abs=1e-4)
    assert cmp.p_value == pytest.approx(0.0017603, rel=1e-3)
    assert "clustered" in cmp.p_text


def test_correlated_moves_are_weaker_evidence_than_independent_ones():
    """All-or-nothing seats (every move of a seat alike) carry the evidence of one trial each, not of n."""
    from unstable_core.report.stats import clustered_two_proportion_test

    first = [(4, 4)] * 6 + [(0, 4)] * 6  # 24 of 48, in 12 seats
    second = [(4, 4)] * 2 + [(0, 4)] * 10  # 8 of 48
    clustered = clustered_two_proportion_test(first, second)
    plain = two_proportion_test(clustered.first, clustered.second)
    assert plain.p_value < 0.001 < clustered.p_value
    # one move per seat: the clustered test is the unpooled z-test (up to the G / (G - 1) correction)
    single = clustered_two_proportion_test([(1, 1)] * 20 + [(0, 1)] * 20, [(1, 1)] * 5 + [(0, 1)] * 35)
    assert single.method == "cluster-z" and single.p_value < 0.001


def test_t_quantile_against_the_tables():
    """97.5% quantiles of Student's t from the standard tables (4 decimals)."""
    from unstable_core.quantiles import t_quantile

    table = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 10: 2.2281, 31: 2.0395, 63: 1.9983}
    for df, expected in table.items():
        assert t_quantile(df) == pytest.approx(expected, abs=3e-4), df
    assert t_quantile(10**6) == pytest.approx(1.959964, abs=1e-5)
    with pytest.raises(ValueError):
        t_quantile(0)


def test_a_mean_figure_has_the_t_interval_and_stays_in_bounds():
    from unstable_core.probes.figures import Figure

    figure = Figure.mean([0.5, 1.0, 1.0, 1.0, 0.5, 1.0])  # mean 5/6, sd sqrt(1/15): +- 2.5706 sd / sqrt(6)
    assert (figure.value, figure.n, figure.exact) == (pytest.approx(5 / 6), 6, False)
    assert figure.low == pytest.approx(5 / 6 - 2.5706 * math.sqrt(1 / 90), abs=1e-4)
    assert figure.high == 1.0
    assert Figure.mean([0.0, 1.0, 1.0, 1.0]).low == 0.0  # 0.75 - 3.1824 * 0.25 < 0: kept in [0, 1]
    exact = Figure.of_exact(0.5, 12).to_dict()
    assert exact == {"value": 0.5, "low": 0.5, "high": 0.5, "n": 12, "exact": True}
