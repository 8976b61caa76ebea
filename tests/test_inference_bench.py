"""measure_backend_throughput (benchmarks/backend_bench.py) on the tiny model."""

import sys
from pathlib import Path

import pytest

from unstable_core.errors import UnstableError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from backend_bench import measure_backend_throughput  # noqa: E402

from unstable_core.inference.hf.backend import TransformersBackend


@pytest.fixture(scope="module")
def backend(tiny_model):
    return TransformersBackend(tiny_model, gather_ms=50.0)


def test_throughput_counts_generated_tokens(backend):
    before = backend.stats()["total_tokens"]
    rate = measure_backend_throughput(backend, ["hello there", [28, 29, 30]], max_tokens=3, temperature=0.0)
    stats = backend.stats()
    assert (
        stats["total_tokens"] - before == 6
    )  # 2 prompts x 3 tokens (the tiny model never emits EOS greedily here)
    assert rate > 0


def test_throughput_refuses_empty_and_failing_prompts(backend):
    with pytest.raises(UnstableError, match="at least one prompt"):
        measure_backend_throughput(backend, [], max_tokens=3)
    with pytest.raises(UnstableError, match="1 of 2 benchmark requests failed"):
        measure_backend_throughput(backend, ["hi", list(range(5000))], max_tokens=3)
