"""CISPO: the clipped weight and the loss against hand computation, the token mean whatever the
micro-batches, a clipped token keeps its gradient, the options. The learning checks are
tests/test_learning.py's, which runs them for every installed learner."""

from __future__ import annotations

import math

import attrs
import pytest

torch = pytest.importorskip("torch")

from unstable_cispo.learner import CISPOLearner, cispo_loss, clipped_weights  # noqa: E402

from unstable_core.errors import ConfigError  # noqa: E402
from unstable_core.testing import sampled_steps  # noqa: E402
from unstable_core.types import Step  # noqa: E402

torch.set_num_threads(1)


def test_the_weight_is_the_ratio_clipped_and_detached():
    logp = torch.log(torch.tensor([[1.0, 1.0, 1.0, 1.0]])).requires_grad_()  # pi = 1 ...
    mu = torch.log(torch.tensor([[1 / 3, 10.0, 1.1, 1.0]]))  # ... so pi/mu = 3, 0.1, 1/1.1, 1
    recorded = torch.tensor([[True, True, True, False]])
    weights = clipped_weights(logp, mu, recorded, eps_low=0.2, eps_high=0.28)
    assert not weights.requires_grad
    assert weights[0].tolist() == pytest.approx([1.28, 0.8, 1 / 1.1, 1.0])  # unrecorded: 1
    no_floor = clipped_weights(logp, mu, recorded, eps_low=1.0, eps_high=0.28)
    assert no_floor[0, 1].item() == pytest.approx(0.1)  # eps_low 1: no lower bound


def test_the_loss_and_its_gradient_by_hand():
    """Two steps of 2 and 1 completion tokens: T = 3, mean length 1.5. A token whose ratio left the range
    keeps a gradient, -w A / T (PPO's clip would give it none)."""
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True], [True, False]])
    weights = torch.tensor([[1.28, 1.0], [0.5, 1.0]])
    advantages = torch.tensor([2.0, -1.0])
    loss = cispo_loss(logp, weights, advantages, mask, mean_tokens=1.5)
    # step 0: -2 (1.28 * -1 + 1 * -2) = 6.56; step 1: 1 * 0.5 * -0.5 = -0.25; (6.56 / 1.5 - 0.25 / 1.5) / 2
    assert loss.item() == pytest.approx((6.56 - 0.25) / 3)
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-2 * 1.28 / 3, -2 / 3, 0.5 / 3, 0.0])


STEPS = [
    Step(pid=0, env_id="t", obs="", act="", prompt_ids=[1, 2, 3], completion_ids=[5, 6, 7], reward=1.0),
    Step(pid=1, env_id="t", obs="", act="", prompt_ids=[1, 2], completion_ids=[8], reward=-1.0),
    Step(pid=0, env_id="t", obs="", act="", prompt_ids=[4, 5], completion_ids=[9, 10], reward=0.5),
]


def _learner(tiny_model, tmp_path, **settings):
    lrn = CISPOLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4}, seed=1, **settings
    )
    lrn.initialize_algorithm()
    return lrn


def test_the_update_is_a_mean_over_its_tokens_whatever_the_micro_batches(tiny_model, tmp_path):
    """Without recorded mu every weight is 1: the loss is -sum A log pi / T over the update's 6 tokens, for
    micro-batches of 1 step as of 3."""
    lrn = _learner(tiny_model, tmp_path / "ref")
    with torch.no_grad():
        tokens = lrn.collate(STEPS)
        logp = lrn.policy_logprobs(tokens)
    expected = sum(-s.reward * logp[i].sum().item() for i, s in enumerate(STEPS)) / 6
    for mbs in (1, 3):
        metrics = _learner(tiny_model, tmp_path / str(mbs), mini_batch_size=mbs, batch_size=3).update(STEPS)
        assert metrics["loss"] == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("shift", [3.0, -3.0])
def test_off_policy_tokens_are_weighted_by_the_clipped_ratio(tiny_model, tmp_path, shift):
    """mu = pi * e^-shift on every token: weight min(e^3, 1.28) or max(e^-3, 0) = e^-3 (eps_low 1), times
    the on-policy loss."""
    steps = sampled_steps(tiny_model, temperature=1.0)
    losses = {}
    for moved in (False, True):
        data = [attrs.evolve(s, logprobs=list(s.logprobs)) for s in steps]
        if moved:
            for s in data:
                s.logprobs = [lp - shift for lp in s.logprobs]
        metrics = _learner(tiny_model, tmp_path / str(moved), max_generation_len=8).update(data)
        losses[moved] = metrics["loss"]
    weight = min(math.exp(shift), 1.28)
    assert losses[True] == pytest.approx(weight * losses[False], rel=1e-4)
    assert metrics["cispo/clipped_fraction"] == (1.0 if shift > 0 else 0.0)
    assert metrics["off_policy/log_ratio_mean"] == pytest.approx(shift, abs=1e-4)


def test_options_are_checked_before_a_run_and_importance_cap_is_refused():
    CISPOLearner.check_options({"eps_low": 0.2, "eps_high": 0.5})
    with pytest.raises(ConfigError, match=r"unknown cispo option\(s\) eps; allowed: eps_low, eps_high"):
        CISPOLearner.check_options({"eps": 0.2})
    with pytest.raises(ConfigError, match="eps_high must be a number > 0, got 0"):
        CISPOLearner.check_options({"eps_high": 0})
    with pytest.raises(ConfigError, match="eps_low must be a number in \\[0, 1\\]"):
        CISPOLearner.check_options({"eps_low": 1.5})
    with pytest.raises(ConfigError, match="drop --importance-cap"):
        CISPOLearner.check_options({}, importance_cap=2.0)
    assert CISPOLearner.default_importance_cap is None


def test_plugin_registers_cispo():
    from unstable_core import plugins

    component = plugins.get_registry().get("learner", "cispo")
    assert component.dist == "unstable-cispo"
    assert component.load() is CISPOLearner
