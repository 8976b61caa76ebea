"""The admission's promises over many pipeline shapes, on the real buffers (unstable_core.testing.admission_sim):
groups G 1-8, steps per game L 1-12, max staleness S 0-3, batch B 4-32, step and episode buffers."""

import itertools

import pytest

from unstable_core.testing.admission_sim import Shape, simulate

GRID = list(itertools.product([1, 2, 3, 8], [1, 3, 8, 12], [0, 1, 2, 3], [4, 5, 16, 32], ["step", "episode"]))


@pytest.mark.parametrize("group_size, steps, max_staleness, batch_size, buffer", GRID)
def test_every_update_happens_within_the_staleness_bound_and_nothing_played_is_lost(
    group_size, steps, max_staleness, batch_size, buffer
):
    outcome = simulate(Shape(group_size, steps, max_staleness, batch_size, buffer=buffer))
    assert not outcome.stalled and outcome.updates == 8
    assert outcome.worst_staleness <= max_staleness
    assert outcome.lost == 0 and outcome.used > 0


@pytest.mark.parametrize("workers, ticks_per_step_update, empty_share", [(2, 2.0, 0.0), (64, 0.05, 0.5)])
def test_the_promises_hold_for_slow_and_fast_learners_and_many_empty_games(
    workers, ticks_per_step_update, empty_share
):
    for group_size, steps, max_staleness, batch_size in itertools.product(
        [1, 4, 8], [2, 12], [0, 2], [4, 32]
    ):
        shape = Shape(group_size, steps, max_staleness, batch_size, workers=workers,
                      ticks_per_step_update=ticks_per_step_update, empty_share=empty_share)  # fmt: skip
        outcome = simulate(shape)
        assert not outcome.stalled and outcome.worst_staleness <= max_staleness and outcome.lost == 0, shape


def test_the_simulation_sees_what_dropping_loses():
    """The same pipeline under --admission drop loses steps: the simulation can tell a loss."""
    outcome = simulate(Shape(1, 8, 0, 4, admission="drop", workers=16))
    assert outcome.lost > 0 and not outcome.stalled
