"""REINFORCE: the loss against hand computation, masking, what an update touches, registration."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from unstable_reinforce.learner import REINFORCELearner, reinforce_loss  # noqa: E402

from unstable_core.testing import sampled_steps  # noqa: E402
from unstable_core.types import Step  # noqa: E402

torch.set_num_threads(1)

BATCH = [
    Step(pid=0, env_id="t", obs="", act="", prompt_ids=[1, 2, 3, 4], completion_ids=[5, 6, 7], reward=1.0),
    Step(
        pid=1, env_id="t", obs="", act="", prompt_ids=[1, 2], completion_ids=[8, 9, 10, 11, 12], reward=-1.0
    ),
    Step(pid=0, env_id="t", obs="", act="", prompt_ids=[1, 2, 3, 4, 5], completion_ids=[8], reward=0.5),
]


@pytest.fixture
def learner(tiny_model, tmp_path):
    lrn = REINFORCELearner.create(
        tiny_model,
        device="cpu",
        run_dir=tmp_path,
        lora_config={"lora_rank": 4},
        max_generation_len=8,
        learning_rate=1e-2,
        gradient_checkpointing=True,  # makes the input embeddings require grad: the test reads their gradient
    )
    lrn.initialize_algorithm()
    # random LoRA B (peft starts it at 0) so the policy differs from the base model
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in lrn.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    return lrn


def test_reinforce_loss_formula_by_hand():
    token_logprobs = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])  # [B=2, T-1=3], 0 = masked
    advantages = torch.tensor([2.0, -1.0])
    # loss_0 = -2 * (-3) / 4 = 1.5 ; loss_1 = -(-1) * (-0.5) / 4 = -0.125 ; mean = 0.6875
    assert reinforce_loss(token_logprobs, advantages, max_generation_len=4).item() == pytest.approx(0.6875)


def test_update_loss_equals_a_plain_forward_per_step(learner):
    expected = []
    with torch.no_grad():
        for step in BATCH:  # one unpadded sequence at a time, log-softmax by hand
            ids = torch.tensor([step.prompt_ids + step.completion_ids])
            logp = torch.log_softmax(learner.model(input_ids=ids).logits[0].float(), dim=-1)  # [T, V]
            n_p = len(step.prompt_ids)
            seq = sum(logp[t - 1, ids[0, t]].item() for t in range(n_p, ids.shape[1]))
            expected.append(-step.reward * seq / 8)
    metrics = learner.update(BATCH)  # one micro-batch per step: the reported loss is their mean
    assert metrics["loss"] == pytest.approx(sum(expected) / 3, rel=1e-4)


def test_masked_positions_get_no_gradient(learner):
    """Logits at positions predicting prompt or padding tokens, and padding embeddings, get zero gradient."""
    tokens = learner.collate(BATCH)  # padded to 7 tokens
    embeds = {}
    embed_layer = learner.model.get_base_model().get_input_embeddings()
    handle = embed_layer.register_forward_hook(lambda mod, args, out: embeds.setdefault("out", out))
    logits = learner.policy_logits(tokens)
    handle.remove()
    logits.retain_grad()
    embeds["out"].retain_grad()
    advantages = torch.tensor([s.reward for s in BATCH])
    reinforce_loss(learner.completion_logprobs(logits, tokens), advantages, 8).backward()

    logit_grad = logits.grad.abs().sum(-1)[:, :-1]  # [B, T-1]: position t predicts token t+1
    assert torch.all(logit_grad[~tokens.target_mask] == 0)
    assert torch.all(logit_grad[tokens.target_mask] > 0)
    embed_grad = embeds["out"].grad.abs().sum(-1)  # [B, T]
    padding = tokens.attention_mask == 0
    assert padding.any() and torch.all(embed_grad[padding] == 0)
    assert torch.all(embed_grad[~padding][:1] > 0)  # the first prompt token does influence the loss


def test_update_trains_lora_only(learner):
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    learner.update(BATCH)
    changed = {n for n, p in learner.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert learner.step == 1


def test_a_positive_advantage_raises_the_sampled_tokens_probability(tiny_model, tmp_path):
    lrn = REINFORCELearner.create(
        tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4}, learning_rate=1e-2
    )
    lrn.initialize_algorithm()
    good = [
        Step(pid=0, env_id="t", obs="", act="", prompt_ids=[1, 2, 3], completion_ids=[40, 41], reward=1.0)
    ]
    tokens = lrn.collate(good)

    def seq_logprob():
        with torch.no_grad():
            return lrn.completion_logprobs(lrn.policy_logits(tokens), tokens).sum().item()

    start = seq_logprob()
    for _ in range(3):
        lrn.update(good)
    assert seq_logprob() > start


def test_on_policy_data_has_an_importance_ratio_of_one(tiny_model, tmp_path):
    """Zero lag, fp32, sampled at T = 0.7: the learner's tempered log-probs are the backend's."""
    steps = sampled_steps(tiny_model, temperature=0.7)
    lrn = REINFORCELearner.create(tiny_model, device="cpu", run_dir=tmp_path, temperature=0.7)
    lrn.initialize_algorithm()
    tokens = lrn.collate(steps)
    with torch.no_grad():
        logp = lrn.policy_logprobs(tokens)  # [B, T-1]
    assert torch.allclose(
        logp[tokens.behaviour_mask], tokens.behaviour_logprobs[tokens.behaviour_mask], atol=1e-4
    )
    metrics = lrn.update(steps)
    assert abs(metrics["off_policy/log_ratio_mean"]) < 1e-4
    assert metrics["off_policy/max_abs_log_ratio"] < 1e-4
    assert metrics["off_policy/kl"] < 1e-8
    assert metrics["off_policy/tokens"] == sum(len(s.completion_ids) for s in steps)


@pytest.mark.parametrize("shift", [3.0, -3.0])
def test_importance_cap_weights_the_loss_by_min_ratio_cap(tiny_model, tmp_path, shift):
    """mu = pi * e^-shift: with cap 2 every weight is min(e^shift, 2), and the loss is that times the plain one."""
    steps = sampled_steps(tiny_model, temperature=1.0)
    for s in steps:
        s.logprobs = [lp - shift for lp in s.logprobs]
    losses = {}
    for cap in (0, 2.0):  # 0: no weights, the plain loss
        lrn = REINFORCELearner.create(
            tiny_model, device="cpu", run_dir=tmp_path, importance_cap=cap, max_generation_len=8, seed=1
        )
        lrn.initialize_algorithm()
        if cap:
            tokens = lrn.collate(steps)
            with torch.no_grad():
                weights = lrn.importance_weights(lrn.policy_logprobs(tokens), tokens)  # [B, T-1]
            assert weights.max().item() <= cap + 1e-6
        metrics = lrn.update(steps)
        losses[cap] = metrics["loss"]
        assert metrics["off_policy/log_ratio_mean"] == pytest.approx(shift, abs=1e-4)
    expected_weight = min(math.exp(shift), 2.0)
    assert losses[2.0] == pytest.approx(expected_weight * losses[0], rel=1e-4)
    assert metrics["off_policy/capped_fraction"] == (1.0 if shift > 0 else 0.0)


def test_plugin_registers_reinforce():
    from unstable_core import plugins

    component = plugins.get_registry().get("learner", "reinforce")
    assert component.dist == "unstable-reinforce"
    assert component.load() is REINFORCELearner
    assert REINFORCELearner.buffer_kind == "step"


def test_legal_pg_is_the_exact_softmax_policy_gradient():
    from unstable_reinforce.legal import legal_pg_loss

    y = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    values = torch.tensor([1.0, -1.0, 0.0])
    legal_pg_loss(y, values).backward()
    logits = y.detach().clone().requires_grad_(True)
    q = torch.softmax(logits, dim=0)
    (-(q * values).sum()).backward()  # -E_q[Q]: its gradient is the exact policy gradient's negative
    assert y.grad.tolist() == pytest.approx(logits.grad.tolist(), abs=1e-6)


def test_legal_pg_is_registered():
    from unstable_reinforce.legal import LegalPGLearner

    from unstable_core.plugins import get_registry

    assert get_registry().load("learner", "reinforce-legal") is LegalPGLearner
