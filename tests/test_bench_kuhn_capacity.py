"""benchmarks/kuhn_capacity.py on the tiny model: the target is card-dependent, a supervised update raises
the model's probability of it, and each measurement is the exact probe's."""

from __future__ import annotations

import random

import pytest

ENV = "KuhnPoker-v0-chips"


@pytest.fixture(scope="module")
def capacity(import_benchmark):
    return import_benchmark("kuhn_capacity")


def test_the_target_depends_on_the_card_and_is_the_tight_policy(capacity):
    assert [capacity.target_of(f"{c}") for c in range(3)] == ["[check]", "[check]", "[bet]"]
    assert [capacity.target_of(f"{c}b") for c in range(3)] == ["[fold]", "[call]", "[call]"]
    from unstable_core.games.analysis.kuhn import KuhnExploitability, positions

    sets = positions(ENV)

    def target_policy(found):
        return [
            {m: float(m == capacity.target_of(p.key)) for m in p.answers} for p in found
        ]  # the target played exactly

    result = KuhnExploitability()(target_policy, ENV)
    assert len(sets) == 12
    assert result.figures["exploitability"].value == pytest.approx(1 / 6, abs=1e-9)


def test_supervised_updates_raise_the_target_and_reinforce_updates_run(capacity, tiny_model):
    import torch

    torch.manual_seed(0)
    state = capacity.build(tiny_model, "kuhn-compact", ENV, lr=1e-2)

    def target_logprob():
        with torch.no_grad():
            return sum(
                capacity.logprob(state["net"], i["prompt"], i["answers"][capacity.target_of(i["key"])]).item()
                for i in state["items"]
            )

    measured = capacity.measure(state, ENV)
    assert set(measured["target"]) == {i["key"] for i in state["items"]}
    assert all(0.0 <= v <= 1.0 for v in measured["target"].values())
    assert 0.0 <= measured["exploitability"] <= 1.0
    before = target_logprob()
    for _ in range(3):
        capacity.update(state, "sft", random.Random(0))
    assert target_logprob() > before + 1.0  # summed over the 12 information sets
    trainable = [p for p in state["net"].parameters() if p.requires_grad]
    weights = [p.detach().clone() for p in trainable]
    capacity.update(state, "reinforce", random.Random(0), explore=0.5)
    capacity.update(state, "reinforce", random.Random(1), explore=1.0, positive_only=True)
    assert any(not torch.equal(p, w) for p, w in zip(trainable, weights, strict=True))
