"""The data-parallel learner: two gloo processes take the same update as one, for every learner."""

from __future__ import annotations

import attrs
import pytest

pytest.importorskip("torch")

from unstable_core.learners.data_parallel import DataParallel, merge_sums  # noqa: E402
from unstable_core.learners.off_policy import OffPolicyStats  # noqa: E402
from unstable_core.testing.data_parallel import compare_workers, exactness_batch  # noqa: E402


@pytest.fixture(scope="module")
def batch(tiny_model):
    return exactness_batch(tiny_model)


@pytest.mark.parametrize("learner", ["reinforce", "a2c", "ppo"])
def test_two_gloo_workers_take_one_workers_update(learner, tiny_model, batch):
    """Variable-length steps, episodes over two envs, rewards of both signs and lagged behaviour log-probs;
    grad_norm among the metrics catches a gradient averaged where it must be summed (Adam alone would not)."""
    agreement = compare_workers(learner, tiny_model, batch, world_size=2)
    print(agreement)
    assert agreement.tensors > 0
    assert agreement.max_relative_diff <= 1e-6
    assert agreement.ranks_identical
    assert agreement.metrics_max_abs_diff <= 1e-6


def test_a_rank_takes_every_world_size_th_micro_batch():
    parts = [DataParallel(r, 3).share(list(range(7))) for r in range(3)]
    assert parts == [[0, 3, 6], [1, 4], [2, 5]]
    assert DataParallel(2, 4).share([0, 1]) == []  # more ranks than micro-batches: an idle rank adds zeros


def test_statistics_merge_by_sum_and_max():
    a = OffPolicyStats(tokens=3, ratio=2.5, max_abs_log_ratio=0.1, capped=1)
    b = OffPolicyStats(tokens=2, ratio=1.5, max_abs_log_ratio=0.4, capped=0)
    merged = merge_sums(a, b)
    assert attrs.astuple(merged) == attrs.astuple(
        OffPolicyStats(tokens=5, ratio=4.0, max_abs_log_ratio=0.4, capped=1)
    )
