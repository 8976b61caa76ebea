"""Wilson intervals and the two-proportion z-test against published and hand-computed values."""

import math

import pytest

from unstable_core.stats import Rate, two_proportion_test, wilson_interval


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
