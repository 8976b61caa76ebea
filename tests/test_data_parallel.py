"""The data-parallel learner: two gloo processes take the same update as one, for every learner."""

from __future__ import annotations

import attrs
import pytest

pytest.importorskip("torch")

from unstable_core.learners.data_parallel import DataParallel, LearnerGroup, merge_sums, wait_for  # noqa: E402
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


def _exit_with(group: LearnerGroup, rank: int, codes: dict[int, int]) -> None:
    import os
    import time

    if rank in codes:
        os._exit(codes[rank])
    time.sleep(600)  # a rank that never ends


def test_a_group_spawns_its_ranks_and_kills_those_still_running_at_the_timeout():
    group = LearnerGroup.here(3)
    assert group.port > 0 and group.backend == "gloo"
    processes = group.spawn(_exit_with, {1: 0, 2: 3}, ranks=[1, 2, 0])
    assert wait_for(processes[:2]) == [0, 3]
    assert wait_for(processes[2:], timeout_s=1) == [None]  # rank 0 would sleep for ten minutes
    assert not any(p.is_alive() for p in processes)


def test_a_group_of_one_joins_nothing_and_still_runs_the_work():
    class Learner:
        data_parallel = None

        def join_data_parallel(self, group):  # pragma: no cover - a group of one must not call it
            raise AssertionError("a group of one joined")

    learner = Learner()
    assert LearnerGroup.here(1).run(learner, 0, lambda ranked: ranked is learner)


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


@pytest.mark.parametrize("learner", ["reinforce"])  # the others' updates equal it bitwise (above)
def test_a_two_worker_learner_passes_the_learning_check(learner, tmp_path):
    from unstable_core.plugins import get_registry
    from unstable_core.testing import START_MAX, check_learner_learns

    result = check_learner_learns(get_registry().load("learner", learner), tmp_path, learner_workers=2)
    print(result.summary())
    assert result.start <= START_MAX and result.passed, result.summary()


def test_a_run_with_two_learner_workers_resumes_with_one(tiny_model, tmp_path):
    """`unstable run --learner-workers 2`: two Ray actors in one placement group and one gloo group; rank 0
    alone writes; the run resumes with another number of workers."""
    import json
    import os
    import subprocess
    import sys

    from unstable_core.io import read_jsonl
    from unstable_core.runtime.recovery.resume import is_learner_record
    from unstable_core.testing import TINY_RUN_ARGS

    def run(*args: str) -> None:
        cmd = [sys.executable, "-m", "unstable_core", "run", *args]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=env)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (
            proc.stdout[-2000:] + proc.stderr[-3000:]
        )

    run_dir = tmp_path / "dp"
    run("--model", tiny_model, "--runs-dir", str(tmp_path), "--run-name", "dp", "--learner", "a2c",
        *TINY_RUN_ARGS, "--learner-workers", "2")  # fmt: skip
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl") if is_learner_record(m)]
    assert steps == [1, 2]  # one record per update: only rank 0 writes
    assert "learner_workers = 2" in (run_dir / "config.toml").read_text()
    run("--resume", str(run_dir), "--learning-steps", "3", "--learner-workers", "1")
    state = json.loads((run_dir / "checkpoints" / "step-3" / "learner_state.json").read_text())
    assert state["step"] == 3


def test_the_other_ranks_end_at_once_when_rank_0_raises_mid_update(tiny_model, batch):
    """Rank 0 raises in its first micro-batch while rank 1 computes its own and waits in the update's
    collectives. Before: rank 0's closing broadcast(None) matched none of them, and rank 1 waited for the
    group's 1,800 s timeout; now rank 0 aborts the group and rank 1's collective fails at once. The bound
    is generous (a loaded machine), far below that timeout."""
    from unstable_core.testing.data_parallel import when_rank_zero_fails

    zero, one = when_rank_zero_fails(tiny_model, batch, timeout_s=600)
    assert zero == "raised RuntimeError: rank 0 failed mid-update"
    assert one is not None, "rank 1 was still waiting for rank 0"
    assert one.startswith("raised CollectiveFailed: the learner group's all_gather failed"), one
