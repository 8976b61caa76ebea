"""benchmarks/kuhn_capacity.py on the saturation test's one-layer model: the target is the tight
card-dependent policy, each row's batch is what its signal trains on, rows train through the learner's own
update, and the direction check finds exact policy gradient lowering q(target) where the policy is wrong."""

from __future__ import annotations

import argparse
import random

import pytest

ENV = "KuhnPoker-v0-chips"


@pytest.fixture(scope="module")
def capacity(import_benchmark):
    return import_benchmark("kuhn_capacity")


@pytest.fixture(scope="module")
def setting(tmp_path_factory, capacity):
    from unstable_core.model_loading import load_tokenizer
    from unstable_core.testing.kuhn_sets import kuhn_sets, make_kuhn_model

    model = make_kuhn_model(str(tmp_path_factory.mktemp("kuhn-model")))
    args = argparse.Namespace(model=model, lr=1e-2, seed=0, env=ENV, updates=2, every=1)
    return args, kuhn_sets(load_tokenizer(model))


def test_the_target_is_the_tight_card_dependent_policy():
    from unstable_core.probes.kuhn_exploitability import KuhnExploitability
    from unstable_core.testing.kuhn_sets import target_of

    assert [target_of(f"{c}") for c in range(3)] == ["[check]", "[check]", "[bet]"]
    assert [target_of(f"{c}b") for c in range(3)] == ["[fold]", "[call]", "[call]"]
    result = KuhnExploitability()(
        lambda found: [{m: float(m == target_of(p.key)) for m in p.answers} for p in found], ENV
    )
    assert result.figures["exploitability"].value == pytest.approx(1 / 6, abs=1e-9)


def test_each_kind_of_batch_carries_its_signal(capacity, setting):
    _, sets = setting
    qs = [[0.5, 0.5]] * len(sets)
    valued = capacity.batch_of("valued", sets, qs, random.Random(0))
    assert all(sorted(s.step_info["legal"]["values"]) == [-1.0, 1.0] for s in valued)
    completion = capacity.batch_of("completion", sets, qs, random.Random(0))
    assert all(not s.step_info and s.reward in (1.0, -1.0) for s in completion)  # the sampled answer only
    explore = capacity.batch_of("explore", sets, [[1.0, 0.0]] * len(sets), random.Random(0))
    for step in explore:  # mu = 0.9 / 0.1: the value is r / mu at the answer played, 0 at the other
        legal = step.step_info["legal"]
        k = legal["played"]
        assert abs(legal["values"][k]) == pytest.approx(1 / (0.9 if k == 0 else 0.1))
        assert legal["values"][1 - k] == 0.0


def test_a_row_trains_through_the_learner_and_is_measured(capacity, setting):
    args, sets = setting
    rows = capacity.train_row(args, "neurd", sets, None)
    assert [r["update"] for r in rows] == [0, 1, 2]
    assert rows[-1]["target"] != rows[0]["target"]
    assert 0.0 <= rows[-1]["exploitability"] <= 1.0


def test_the_direction_check_finds_policy_gradient_pointing_away(capacity, setting):
    args, sets = setting
    start = capacity.card_blind(args, sets)
    found = capacity.direction(args, sets, start)
    wrong = ("0", "0p", "0b", "0pb", "1", "1p")  # check J and Q, fold J: the card-blind policy bets and calls
    assert all(found["exact-pg"][k] < 0 for k in wrong)
    assert all(found["neurd"][k] > 0 and found["cross-entropy"][k] > 0 for k in wrong)


def test_bad_rows_end_in_one_line(capacity, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["kuhn_capacity.py", "--rows", "sft"])
    with pytest.raises(SystemExit) as exit_:
        capacity.parse()
    assert exit_.value.code == 2
    assert "unknown row(s) sft" in capsys.readouterr().err
