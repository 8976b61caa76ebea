"""NeuRD: the loss against hand computation, the threshold, the legal-answer path of an update, options."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from unstable_neurd.learner import NeuRDLearner, neurd_loss  # noqa: E402

from unstable_core.errors import ConfigError  # noqa: E402
from unstable_core.learners.legal import LEGAL, LegalState, answer_logprobs, legal_logq  # noqa: E402
from unstable_core.types import Step  # noqa: E402

torch.set_num_threads(1)


def test_neurd_loss_by_hand():
    y = torch.tensor([math.log(0.9), math.log(0.1)], requires_grad=True)
    values = torch.tensor([1.0, -1.0])
    loss, gate = neurd_loss(y, values, threshold=5.0)
    # V = 0.9 - 0.1 = 0.8, A = [0.2, -1.8]; centred y = y - mean(y)
    centred = y.detach() - y.detach().mean()
    assert loss.item() == pytest.approx(-(0.2 * centred[0] - 1.8 * centred[1]).item())
    assert gate.tolist() == [True, True]
    loss.backward()
    # d/dy_a of -sum_b A_b (y_b - mean y) = -(A_a - mean A): each logit moves by its advantage, whatever q is
    assert y.grad.tolist() == pytest.approx([-(0.2 + 0.8), -(-1.8 + 0.8)])


def test_neurd_moves_a_rare_answer_at_full_speed():
    """Softmax policy gradient scales a move's push by its probability; NeuRD does not."""
    for p in (0.5, 1e-4):
        y = torch.tensor([math.log(p), math.log(1 - p)], requires_grad=True)
        loss, _ = neurd_loss(y, torch.tensor([1.0, -1.0]), threshold=20.0)
        loss.backward()
        assert y.grad[0].item() == pytest.approx(-1.0)  # -(A_0 - mean A) = -1 at p = 0.5 and at p = 1e-4


def test_threshold_stops_a_logit_past_beta():
    y = torch.tensor([3.0, -3.0], requires_grad=True)  # centred logits +-3, beyond beta = 2
    loss, gate = neurd_loss(y, torch.tensor([1.0, -1.0]), threshold=2.0)
    assert gate.tolist() == [False, False]  # both pushes would go further out
    loss, gate = neurd_loss(y, torch.tensor([-1.0, 1.0]), threshold=2.0)
    assert gate.tolist() == [True, True]  # pushes back inside are kept


@pytest.fixture
def learner(tiny_model, tmp_path):
    lrn = NeuRDLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4}, learning_rate=1e-2
    )
    lrn.initialize_algorithm(threshold=1.0, entropy_coef=0.1)
    return lrn


def legal_step(values=None, played=1, reward=1.0):
    legal = {"moves": ["[a]", "[b]", "[c]"], "ids": [[5, 77], [6, 77], [7, 8, 77]], "played": played}
    if values is not None:
        legal.update(values=values, k=1, cost={"turns": 6, "seconds": 0.5})
    return Step(
        pid=0, env_id="t", obs="", act="", prompt_ids=[1, 2, 3, 4], completion_ids=[6, 77], reward=reward,
        step_info={LEGAL: legal},
    )  # fmt: skip


def test_answer_logprobs_are_each_answers_tokens_summed(learner):
    state = LegalState.of(legal_step())
    with torch.no_grad():
        y = answer_logprobs(learner, state)
        for k, ids in enumerate(state.ids):
            full = torch.tensor([list(state.step.prompt_ids) + list(ids)])
            logp = torch.log_softmax(learner.model(input_ids=full).logits[0].float(), dim=-1)
            expected = sum(logp[3 + i, t].item() for i, t in enumerate(ids))
            assert y[k].item() == pytest.approx(expected, abs=1e-4)


def test_update_raises_the_best_answer(learner):
    step = legal_step(values=[-1.0, -1.0, 1.0])
    state = LegalState.of(step)
    before = legal_logq(answer_logprobs(learner, state)).exp()[2].item()
    for _ in range(5):
        metrics = learner.update([step])
    after = legal_logq(answer_logprobs(learner, state)).exp()[2].item()
    assert math.log(after) > math.log(before) + 0.5  # NeuRD moves the logit, whatever its q
    assert metrics["legal/steps"] == 1.0 and metrics["legal/branched"] == 1.0
    assert metrics["branch/turns"] == 6.0  # the step's recorded cost, per step of the batch
    assert 0 <= metrics["neurd/gated_fraction"] <= 1


def test_a_step_without_values_learns_from_the_played_answer(learner):
    step = legal_step(played=0, reward=1.0)
    state = LegalState.of(step)
    before = legal_logq(answer_logprobs(learner, state)).exp()[0].item()
    for _ in range(5):
        metrics = learner.update([step])
    assert legal_logq(answer_logprobs(learner, state)).exp()[0].item() > before
    assert metrics["legal/branched"] == 0.0


def test_a_step_without_legal_answers_takes_the_sampled_gradient(learner):
    plain = Step(pid=0, env_id="t", obs="", act="", prompt_ids=[1, 2, 3], completion_ids=[5, 6], reward=1.0)
    metrics = learner.update([plain, legal_step(values=[0.0, 1.0, 0.0])])
    assert metrics["legal/steps"] == 0.5 and "loss/sampled" in metrics


def test_options_are_checked():
    with pytest.raises(ConfigError, match="threshold"):
        NeuRDLearner.check_options({"threshold": 0})
    with pytest.raises(ConfigError, match="entropy_coef"):
        NeuRDLearner.check_options({"entropy_coef": -1})
    with pytest.raises(ConfigError, match="unknown"):
        NeuRDLearner.check_options({"eta": 1})


def test_registered():
    from unstable_core.plugins import get_registry

    assert get_registry().load("learner", "neurd") is NeuRDLearner
