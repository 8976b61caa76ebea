"""measure_backend_throughput on the tiny model."""

import pytest

from unstable_core.errors import UnstableError
from unstable_core.inference.bench import measure_backend_throughput
from unstable_core.inference.hf import TransformersBackend


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
