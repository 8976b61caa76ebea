"""BaseLearner: collation and masks, log-prob alignment, micro-batching, clipping, checkpoints, errors."""

from __future__ import annotations

import json
import math
import os

import pytest

torch = pytest.importorskip("torch")

from unstable_core.errors import ConfigError, UnstableError  # noqa: E402
from unstable_core.learners import BaseLearner, collate, completion_logprobs  # noqa: E402
from unstable_core.learners.batch import too_long  # noqa: E402
from unstable_core.learners.checkpoint import optimizer_state_from_flat, optimizer_state_to_flat  # noqa: E402
from unstable_core.testing import sampled_steps  # noqa: E402
from unstable_core.types import Step  # noqa: E402

torch.set_num_threads(1)


def make_step(prompt, completion, reward=1.0, **kw) -> Step:
    return Step(
        pid=kw.pop("pid", 0),
        env_id="test",
        obs="",
        act="",
        prompt_ids=prompt,
        completion_ids=completion,
        reward=reward,
        **kw,
    )


class SumLogprobLearner(BaseLearner):
    """The smallest real algorithm: maximise reward * sum of completion log-probs (per-sample mean)."""

    def _update(self, batch, scale):
        tokens = self.collate(batch)
        logp = self.policy_logprobs(tokens)  # [B, T-1]
        weights = self.importance_weights(logp, tokens)
        rewards = torch.tensor([s.reward for s in batch], device=self.device)
        loss = (-rewards * (weights * logp).sum(-1)).mean()
        (loss * scale).backward()
        return {"loss": loss.item()}


@pytest.fixture
def learner(tiny_model, tmp_path):
    lrn = SumLogprobLearner.create(
        tiny_model,
        device="cpu",
        run_dir=tmp_path / "run",
        learning_rate=1e-2,
        lora_config={"lora_rank": 4},
        seed=1,
    )
    lrn.initialize_algorithm()
    return lrn


BATCH = [
    make_step([1, 2, 3, 4], [5, 6, 7], reward=1.0),
    make_step([1, 2], [8, 9, 10, 11, 12], reward=-1.0),
    make_step([1, 2, 3, 4, 5, 6], [8], reward=0.5),
]


# ---- collation (no model) ----------------------------------------------------------------------


def test_too_long_counts_prompt_and_completion():
    assert not too_long(make_step([1, 2, 3, 4], [5, 6]), None)
    assert not too_long(make_step([1, 2, 3, 4], [5, 6]), 6)
    assert too_long(make_step([1, 2, 3, 4], [5, 6]), 5)


def test_collate_aligns_behaviour_logprobs_with_the_targets():
    tb = collate(
        [make_step([1, 2, 3], [4, 5], logprobs=[-0.5, -1.5]), make_step([7], [8], logprobs=[])],
        pad_token_id=0,
    )
    # position t predicts token t+1: row 0's completion tokens 4, 5 are targets 2 and 3 (index 2, 3 of [B, T-1])
    assert tb.behaviour_logprobs.tolist() == [[0.0, 0.0, -0.5, -1.5], [0.0, 0.0, 0.0, 0.0]]
    assert tb.behaviour_mask.tolist() == [[False, False, True, True], [False, False, False, False]]
    assert tb.target_mask.tolist() == [[False, False, True, True], [True, False, False, False]]


def test_collate_pads_right_and_masks_prompt_and_padding():
    tb = collate([make_step([1, 2, 3], [4]), make_step([7], [8, 9])], pad_token_id=99)
    assert tb.input_ids.tolist() == [[1, 2, 3, 4], [7, 8, 9, 99]]
    assert tb.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert tb.completion_mask.tolist() == [[False, False, False, True], [False, True, True, False]]
    assert tb.target_mask.tolist() == [[False, False, True], [True, True, False]]
    assert tb.last_prompt_index.tolist() == [2, 0]


def test_collate_rejects_empty_inputs():
    with pytest.raises(UnstableError, match="empty batch"):
        collate([], pad_token_id=0)
    with pytest.raises(UnstableError, match="no prompt_ids"):
        collate([make_step([], [1])], pad_token_id=0)


def test_completion_logprobs_reads_the_next_token_with_a_right_shift():
    tb = collate([make_step([0], [2, 1])], pad_token_id=0)  # input [0, 2, 1]; completion = tokens 1..2
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0)], [math.log(3.0), 0.0, 0.0], [5.0, 5.0, 5.0]]])
    # position 0 predicts token 2: p = 2 / (1 + 1 + 2) = 0.5 ; position 1 predicts token 1: p = 1 / (3 + 1 + 1) = 0.2
    logp = completion_logprobs(logits, tb)
    assert logp.shape == (1, 2)
    assert logp[0].tolist() == pytest.approx([math.log(0.5), math.log(0.2)], abs=1e-6)


def test_completion_logprobs_are_zero_with_zero_gradient_off_the_completion():
    tb = collate([make_step([3, 1], [2]), make_step([1], [2])], pad_token_id=0)  # row 1 padded: [1, 2, 0]
    logits = torch.randn(2, 3, 4, requires_grad=True)
    logp = completion_logprobs(logits, tb)
    assert logp[0, 0].item() == 0.0 and logp[1, 1].item() == 0.0  # prompt target, pad target
    logp.sum().backward()
    grad_norm = logits.grad.abs().sum(-1)  # [B, T]
    # rows' positions that predict completion tokens: (0, 1) and (1, 0); nothing else gets a gradient
    assert (grad_norm[0, 1] > 0) and (grad_norm[1, 0] > 0)
    assert grad_norm[0, 0] == 0 and grad_norm[0, 2] == 0 and grad_norm[1, 1] == 0 and grad_norm[1, 2] == 0


def test_completion_logprobs_are_those_of_the_tempered_policy():
    tb = collate([make_step([0], [2])], pad_token_id=0)
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0)], [0.0, 0.0, 0.0]]])
    # T = 0.5: softmax([0, 0, 2 log 2]) = [1, 1, 4] / 6
    assert completion_logprobs(logits, tb, temperature=0.5)[0, 0].item() == pytest.approx(math.log(4 / 6))
    assert completion_logprobs(logits, tb, temperature=0.0)[0, 0].item() == pytest.approx(math.log(0.5))


def test_optimizer_state_round_trips_without_pickle():
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([param], lr=0.1)
    param.grad = torch.tensor([1.0, -2.0, 3.0])
    opt.step()
    tensors, rest = optimizer_state_to_flat(opt.state_dict())
    assert set(tensors) == {"state/0/step", "state/0/exp_avg", "state/0/exp_avg_sq"}
    json.dumps(rest)  # the rest is plain JSON
    restored = optimizer_state_from_flat(tensors, json.loads(json.dumps(rest)))
    opt2 = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=0.5)
    opt2.load_state_dict(restored)
    assert opt2.param_groups[0]["lr"] == 0.1
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


# ---- the learner on the tiny model -------------------------------------------------------------


def test_config_errors_name_the_key(tiny_model, tmp_path):
    with pytest.raises(ConfigError, match="mini_batch_size"):
        SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, mini_batch_size=0)
    with pytest.raises(ConfigError, match="unknown lora_config key.*rank"):
        SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, lora_config={"rank": 8})
    with pytest.raises(ConfigError, match="target_modules.*choose from"):
        SumLogprobLearner.create(
            tiny_model, device="cpu", run_dir=tmp_path, lora_config={"target_modules": ["c_attn"]}
        )
    with pytest.raises(ConfigError, match="max_train_len"):
        SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, max_train_len=1)


def test_lora_targets_are_filtered_to_existing_modules(tiny_model, tmp_path):
    lrn = SumLogprobLearner.create(
        tiny_model,
        device="cpu",
        run_dir=tmp_path,
        lora_config={"target_modules": ["q_proj", "c_attn", "v_proj"]},
    )
    assert lrn.target_modules == ["q_proj", "v_proj"]
    names = [n for n, p in lrn.model.named_parameters() if p.requires_grad]
    # 2 layers x 2 modules x (A, B)
    assert len(names) == 8 and all("lora_" in n and ("q_proj" in n or "v_proj" in n) for n in names)


def test_unknown_algorithm_options_and_missing_initialisation(tiny_model, tmp_path):
    lrn = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path)
    with pytest.raises(UnstableError, match="initialize_algorithm"):
        lrn.update(BATCH)
    with pytest.raises(UnstableError, match="unknown SumLogprobLearner option.*gamma.*allowed: none"):
        lrn.initialize_algorithm(gamma=0.9)
    lrn.initialize_algorithm()
    with pytest.raises(UnstableError, match="empty batch"):
        lrn.update([])


def test_update_changes_only_lora_and_counts_one_step(learner):
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    metrics = learner.update(BATCH)
    assert learner.step == 1 and metrics["step"] == 1.0 and metrics["batch_size"] == 3.0
    assert metrics["policy_lag"] == 0.0  # sampled by version 0, trained on version 0
    assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    for name, param in learner.model.named_parameters():
        if "lora_" in name:
            continue
        assert torch.equal(param, before[name]), f"base weight {name} changed"
    assert any(not torch.equal(p, before[n]) for n, p in learner.model.named_parameters() if "lora_B" in n)
    assert learner.update(BATCH)["policy_lag"] == 1.0  # the same version-0 steps, one update later


def test_a_linear_schedule_anneals_the_rate_and_a_resumed_learner_continues_it(tiny_model, tmp_path):
    def make(**settings):
        lrn = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path / "run", learning_rate=1e-2,
                                       lora_config={"lora_rank": 4}, learning_steps=4, **settings)  # fmt: skip
        lrn.initialize_algorithm()
        return lrn

    lrn = make(lr_schedule="linear")
    rates = [lrn.update(BATCH)["lr"] for _ in range(2)]
    assert rates == pytest.approx([1e-2, 0.75e-2])
    resumed = make(lr_schedule="linear")
    path = lrn.save_checkpoint()
    resumed.load_checkpoint(path)
    rates += [resumed.update(BATCH)["lr"] for _ in range(3)]
    assert rates == pytest.approx([1e-2, 0.75e-2, 0.5e-2, 0.25e-2, 0.25e-2])  # never below the last update's
    constant = make()
    constant.load_checkpoint(path)  # an annealed optimizer state, read by a constant run
    assert constant.update(BATCH)["lr"] == pytest.approx(1e-2)
    with pytest.raises(ConfigError, match="lr_schedule"):
        make(lr_schedule="cosine")


def _grads_at_step(lrn, batch):
    """Run one update and return the (clipped) gradients the optimizer stepped with."""
    captured = []
    opt = lrn.optimizers["policy"]
    handle = opt.register_step_pre_hook(
        lambda o, args, kwargs: captured.append([p.grad.clone() for g in o.param_groups for p in g["params"]])
    )
    lrn.update(batch)
    handle.remove()
    return captured[0]


def test_gradient_accumulation_matches_one_big_micro_batch(tiny_model, tmp_path):
    grads = {}
    for mbs in (1, 3):
        lrn = SumLogprobLearner.create(
            tiny_model,
            device="cpu",
            run_dir=tmp_path,
            mini_batch_size=mbs,
            gradient_clipping=1e9,
            lora_config={"lora_rank": 4},
            seed=3,
        )
        lrn.initialize_algorithm()
        grads[mbs] = _grads_at_step(lrn, BATCH)
    assert len(grads[1]) == len(grads[3])
    for a, b in zip(grads[1], grads[3], strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)  # padding changes the summation order


def test_a_batch_larger_than_batch_size_is_the_mean_of_its_steps(tiny_model, tmp_path):
    """A batch that took whole groups or a version's surplus holds more than --batch-size steps: each of
    its n steps weighs 1/n (the loss is a mean, its size independent of n), not 1/batch_size."""

    def grads(batch):
        lrn = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, batch_size=2,
                                       mini_batch_size=2, gradient_clipping=1e9, lora_config={"lora_rank": 4},
                                       seed=3)  # fmt: skip
        lrn.initialize_algorithm()
        return _grads_at_step(lrn, batch)

    whole = grads(BATCH)  # 3 steps for a batch size of 2
    alone = [grads([step]) for step in BATCH]
    for i, g in enumerate(whole):
        assert torch.allclose(g, sum(a[i] for a in alone) / 3, rtol=1e-4, atol=1e-6)


def test_micro_batches_hold_steps_of_neighbouring_lengths(tiny_model, tmp_path):
    """Sorted by length before they are cut, so a micro-batch pads little; the gradient is the same sum."""
    seen = []

    class Recording(SumLogprobLearner):
        def _update(self, batch, scale):
            seen.append([len(s.prompt_ids) + len(s.completion_ids) for s in batch])
            return super()._update(batch, scale)

    lengths = [9, 3, 8, 4, 7, 2]
    batch = [make_step([1] * (n - 1), [5], reward=(-1.0) ** n) for n in lengths]
    grads = {}
    for cls in (Recording, SumLogprobLearner):
        lrn = cls.create(
            tiny_model,
            device="cpu",
            run_dir=tmp_path / cls.__name__,
            mini_batch_size=2 if cls is Recording else len(batch),
            gradient_clipping=1e9,
            lora_config={"lora_rank": 4},
            seed=3,
        )
        lrn.initialize_algorithm()
        grads[cls] = _grads_at_step(lrn, batch)
    assert seen == [[2, 3], [4, 7], [8, 9]]  # in order they would have been [9, 3], [8, 4], [7, 2]
    for a, b in zip(grads[Recording], grads[SumLogprobLearner], strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_prompt_prefix_shared_by_a_micro_batch_runs_once(learner):
    """Steps of one prompt frame (a game's rules for one seat) share its prefix: the decoder runs it once at
    batch size 1, and the log-probs and gradients are those of the whole batch run as it is."""
    from unstable_core.learners.batch import head_logprobs
    from unstable_core.learners.shared_prefix import ORDER_TOKENS, micro_batch_order

    frame = [3 + i % 50 for i in range(ORDER_TOKENS)]  # longer than the tokens that sort steps
    steps = [
        make_step(frame + [40, 41], [5, 6, 7], reward=1.0),
        make_step(frame + [42], [8, 9], reward=-1.0),
        make_step(frame + [43, 44, 45], [8], reward=0.5),
    ]
    tokens = learner.collate(steps)
    base = learner.model.get_base_model()
    decoder = base.get_decoder()
    shapes = []
    hook = decoder.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    weights = torch.randn(tokens.target_mask.shape)

    def logprobs_and_grads(compute):
        learner.model.zero_grad()
        logp = compute()
        (weights * logp).sum().backward()
        grads = [p.grad.clone() for p in learner.adapter_parameters("default")]
        return logp.detach(), grads

    try:
        shared, shared_grads = logprobs_and_grads(lambda: learner.policy_logprobs(tokens))
    finally:
        hook.remove()
    assert shapes == [(1, len(frame)), (3, tokens.input_ids.shape[1] - len(frame))]
    whole, whole_grads = logprobs_and_grads(
        lambda: head_logprobs(
            decoder(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask).last_hidden_state,
            base.get_output_embeddings(),
            tokens,
        )
    )
    assert torch.allclose(shared, whole, atol=1e-5)
    for a, b in zip(shared_grads, whole_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    # micro-batches are cut from steps sorted by their frame, then length
    other = [make_step([2] * 70 + [40], [5]), make_step([2] * 70, [5, 6, 7, 8])]
    mixed = [steps[0], other[0], steps[1], other[1], steps[2]]
    assert sorted(mixed, key=micro_batch_order) == [other[0], other[1], steps[1], steps[2], steps[0]]


def test_grad_norm_is_clipped_to_gradient_clipping(tiny_model, tmp_path):
    lrn = SumLogprobLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path, gradient_clipping=1e-6, lora_config={"lora_rank": 4}
    )
    lrn.initialize_algorithm()
    grads = _grads_at_step(lrn, BATCH)
    total = torch.sqrt(sum((g**2).sum() for g in grads))
    assert total.item() == pytest.approx(1e-6, rel=1e-3)


# ---- the learner trains the policy that sampled ------------------------------------------------


def test_zero_lag_fp32_log_ratio_is_zero_at_the_sampling_temperature(tiny_model, tmp_path):
    steps = sampled_steps(tiny_model, temperature=0.7)
    lrn = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, temperature=0.7)
    lrn.initialize_algorithm()
    metrics = lrn.update(steps)
    assert abs(metrics["off_policy/log_ratio_mean"]) < 1e-4
    assert metrics["off_policy/max_abs_log_ratio"] < 1e-4
    assert abs(metrics["off_policy/kl"]) < 1e-6 and metrics["off_policy/ratio_mean"] == pytest.approx(1.0)
    assert metrics["off_policy/tokens"] == sum(len(s.completion_ids) for s in steps)

    # trained at temperature 1 (the old behaviour) the same data reads as off-policy
    wrong = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, temperature=1.0)
    wrong.initialize_algorithm()
    assert wrong.update(steps)["off_policy/max_abs_log_ratio"] > 1e-2


def test_the_lag_0_tokens_measure_the_backends_contract_whatever_the_rest_of_the_batch(tiny_model, tmp_path):
    """In a lagged batch only the steps the trained version sampled show the backend's numerics: their
    largest gap is reported apart (on_policy_*), the others' lag does not hide it."""
    steps = sampled_steps(tiny_model, temperature=0.7)
    lrn = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, temperature=0.7)
    lrn.initialize_algorithm()
    lrn.step = 3
    for k, step in enumerate(steps):  # even steps by version 3 (this one), odd by version 2, which differed
        step.policy_version = 3 if k % 2 == 0 else 2
        if k % 2:
            step.logprobs = [lp - 0.5 for lp in step.logprobs]
    metrics = lrn.update(steps)
    fresh = sum(len(s.completion_ids) for s in steps[::2])
    assert metrics["off_policy/on_policy_tokens"] == fresh < metrics["off_policy/tokens"]
    assert metrics["off_policy/on_policy_max_abs_log_ratio"] < 1e-4
    assert metrics["off_policy/max_abs_log_ratio"] == pytest.approx(0.5, abs=1e-3)


def test_top_p_logprobs_are_those_of_the_nucleus_sampled_from(tiny_model, tmp_path):
    """At T = 0.7, top_p = 0.9 the backend records the log-prob renormalised over the nucleus it sampled
    from, and a learner given the run's top_p recomputes exactly that; the full-vocabulary one differs."""
    from unstable_core.inference.base import GenerationRequest, SamplingParams
    from unstable_core.inference.hf.backend import TransformersBackend

    backend = TransformersBackend(tiny_model, device="cpu")
    prompts = [tuple(backend.tokenizer.encode(t)) for t in ("hello there", "one two three", "a b c d e")]
    params = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=6, seed=5)
    outs = backend.generate_batch([GenerationRequest(p, params=params) for p in prompts])
    steps = [
        make_step(list(p), list(o.token_ids), logprobs=list(o.logprobs), game_idx=i)
        for i, (p, o) in enumerate(zip(prompts, outs, strict=True))
    ]
    nucleus = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, temperature=0.7, top_p=0.9)
    nucleus.initialize_algorithm()
    tokens = nucleus.collate(steps)
    recorded = tokens.behaviour_logprobs[tokens.behaviour_mask]
    with torch.no_grad():
        recomputed = nucleus.policy_logprobs(tokens)[tokens.behaviour_mask]
        full = nucleus.completion_logprobs(nucleus.policy_logits(tokens), tokens)[tokens.behaviour_mask]
    assert torch.allclose(recorded, recomputed, atol=1e-5)
    nucleus.config = type(nucleus.config)(**{**vars_of(nucleus.config), "top_p": 1.0})
    with torch.no_grad():
        whole = nucleus.policy_logprobs(tokens)[tokens.behaviour_mask]
    # a near-uniform random model: the 0.9 nucleus drops about a tenth of the mass, log(1 / 0.9) = 0.105
    assert (recorded - whole).min().item() > 0.05
    assert torch.allclose(full, recomputed, atol=1e-5)  # the full-logits path applies the nucleus too
    nucleus.config = type(nucleus.config)(**{**vars_of(nucleus.config), "top_p": 0.9})
    assert nucleus.update(steps)["off_policy/max_abs_log_ratio"] < 1e-4  # the logged ratio is the true one


def test_a_learner_refuses_a_top_p_outside_its_range(tiny_model, tmp_path):
    with pytest.raises(ConfigError, match="top_p must be > 0.0 and <= 1"):
        SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, top_p=0.0)


def test_policy_logprobs_equal_the_full_logits_path(learner):
    tokens = learner.collate(BATCH)
    learner.config = type(learner.config)(**{**vars_of(learner.config), "temperature": 0.7})
    with torch.no_grad():
        fast = learner.policy_logprobs(tokens)
        plain = learner.completion_logprobs(learner.policy_logits(tokens), tokens)
    assert torch.allclose(fast, plain, atol=1e-5)


def vars_of(cfg):
    import attrs

    return attrs.asdict(cfg)


def test_a_lora_on_the_lm_head_is_not_bypassed(tiny_model, tmp_path):
    """A LoRA-wrapped head is not a plain Linear: policy_logprobs then runs the model's own head."""
    lrn = SumLogprobLearner.create(
        tiny_model,
        device="cpu",
        run_dir=tmp_path,
        lora_config={"lora_rank": 4, "target_modules": ["q_proj", "lm_head"]},
        temperature=0.7,
    )
    lrn.initialize_algorithm()
    with torch.no_grad():
        for name, param in lrn.model.named_parameters():
            if "lora_B" in name and "lm_head" in name:
                param.normal_(0, 1.0)
        tokens = lrn.collate(BATCH)
        got = lrn.policy_logprobs(tokens)
        full = lrn.completion_logprobs(lrn.policy_logits(tokens), tokens)
    assert torch.allclose(got, full, atol=1e-5)


def test_bf16_logprobs_agree_with_an_fp32_head(tiny_model, tmp_path):
    """Backend and learner both in bf16: with the LM head and log-softmax in fp32 they agree closely."""
    from unstable_core.learners.batch import completion_logprobs as from_logits

    steps = sampled_steps(tiny_model, temperature=1.0, dtype=torch.bfloat16)
    lrn = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path)
    lrn.model.to(torch.bfloat16)
    lrn.initialize_algorithm()
    tokens = lrn.collate(steps)
    with torch.no_grad():
        logp = lrn.policy_logprobs(tokens)
        bf16_head = from_logits(lrn.policy_logits(tokens).bfloat16(), tokens)
    mask = tokens.behaviour_mask
    fp32_gap = (logp - tokens.behaviour_logprobs)[mask].abs().max().item()
    bf16_gap = (bf16_head - tokens.behaviour_logprobs)[mask].abs().max().item()
    assert fp32_gap < 0.05 and fp32_gap < bf16_gap
    assert lrn.update(steps)["off_policy/max_abs_log_ratio"] == pytest.approx(fp32_gap, abs=1e-3)


def test_importance_cap_truncates_the_weights(tiny_model, tmp_path):
    steps = sampled_steps(tiny_model, temperature=1.0)
    for s in steps:  # pretend a much less likely behaviour policy sampled them: pi / mu = e^3 > cap
        s.logprobs = [lp - 3.0 for lp in s.logprobs]
    lrn = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, importance_cap=2.0)
    lrn.initialize_algorithm()
    tokens = lrn.collate(steps)
    with torch.no_grad():
        weights = lrn.importance_weights(lrn.policy_logprobs(tokens), tokens)
    assert weights[tokens.behaviour_mask].max().item() == pytest.approx(2.0)
    assert weights[~tokens.behaviour_mask].eq(1.0).all()
    metrics = lrn.update(steps)
    assert metrics["off_policy/capped_fraction"] == 1.0
    assert metrics["off_policy/log_ratio_mean"] == pytest.approx(3.0, abs=1e-3)


def test_with_lora_dropout_the_importance_weights_see_the_policy_not_a_dropout_mask(tiny_model, tmp_path):
    """lora_dropout 0.5, mu recorded from the policy itself (eval mode): pi / mu is 1 on every token, as at
    dropout 0; a train-mode pass read it as up to e^0.6 off-policy and weighted the gradient by that noise."""
    lrn = SumLogprobLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4, "lora_dropout": 0.5},
        importance_cap=10.0, seed=0,
    )  # fmt: skip
    lrn.initialize_algorithm()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in lrn.model.named_parameters():
            if "lora_B" in name:  # a LoRA that moves the policy, so that dropping it shows
                param.normal_(0, 0.1)
    lrn.model.eval()
    tokens = lrn.collate(BATCH)
    with torch.no_grad():
        policy = lrn.policy_logprobs(tokens)
    lrn.model.train()
    steps = []
    for b, s in enumerate(BATCH):
        n_p, n = len(s.prompt_ids), len(s.prompt_ids) + len(s.completion_ids)
        logprobs = policy[b, n_p - 1 : n - 1].tolist()
        steps.append(make_step(s.prompt_ids, s.completion_ids, s.reward, logprobs=logprobs))
    tokens = lrn.collate(steps)
    weights = lrn.importance_weights(lrn.policy_logprobs(tokens), tokens)
    assert torch.allclose(weights, torch.ones_like(weights), atol=1e-5) and lrn.model.training
    metrics = lrn.update(steps)
    assert metrics["off_policy/max_abs_log_ratio"] < 1e-5 and metrics["grad_norm"] > 0


def test_an_unset_importance_cap_is_the_learners_default():
    from unstable_core.config import RunConfig
    from unstable_core.learners.settings import LearnerConfig

    class OwnWeights(BaseLearner):
        default_importance_cap = None  # e.g. ppo: its loss truncates pi_old / mu itself

    unset, given = RunConfig(), RunConfig(importance_cap=5.0)
    assert unset.importance_cap is None
    assert LearnerConfig.from_run(unset, BaseLearner).importance_cap == 2.0
    assert LearnerConfig.from_run(unset, OwnWeights).importance_cap is None
    assert LearnerConfig.from_run(given, BaseLearner).importance_cap == 5.0
    assert LearnerConfig.from_run(unset).importance_cap is None  # no class: as configured
    assert LearnerConfig.from_run(RunConfig(importance_cap=0), BaseLearner).importance_cap is None  # off


def test_learner_config_is_declared_by_runconfig():
    """LearnerConfig's settings are RunConfig's fields, with their types and checks (once declared)."""
    import attrs

    from unstable_core.config import RunConfig
    from unstable_core.learners.settings import LEARNER_SETTINGS, LearnerConfig

    run = attrs.fields_dict(RunConfig)
    assert [f.name for f in attrs.fields(LearnerConfig)] == list(LEARNER_SETTINGS)
    assert all(f.type == run[f.name].type for f in attrs.fields(LearnerConfig))
    settings = attrs.asdict(LearnerConfig.from_run(RunConfig()))
    with pytest.raises(ConfigError, match="learning_rate must be > 0"):
        LearnerConfig(**{**settings, "learning_rate": 0.0})
    with pytest.raises(ConfigError, match="batch_size must be an integer"):
        LearnerConfig(**{**settings, "batch_size": "4"})


def test_too_long_steps_are_dropped_and_counted_never_cut(tiny_model, tmp_path):
    lrn = SumLogprobLearner.create(tiny_model, device="cpu", run_dir=tmp_path, max_train_len=6)
    lrn.initialize_algorithm()
    batch = [make_step([1, 2, 3], [4, 5]), make_step([1, 2, 3, 4, 5], [6, 7]), make_step([1], [2])]
    metrics = lrn.update(batch)
    assert metrics["steps_too_long"] == 1.0 and metrics["batch_size"] == 2.0
    with pytest.raises(UnstableError, match="max_train_len"):
        lrn.update([make_step([1, 2, 3, 4, 5], [6, 7])])


def test_episode_learners_drop_whole_episodes(tiny_model, tmp_path):
    class EpisodeLearner(SumLogprobLearner):
        buffer_kind = "episode"

    lrn = EpisodeLearner.create(tiny_model, device="cpu", run_dir=tmp_path, max_train_len=6)
    lrn.initialize_algorithm()
    batch = [
        make_step([1, 2], [3], game_idx=0, turn=0),
        make_step([1, 2, 3, 4, 5, 6], [7], game_idx=0, turn=2),  # too long: the whole episode goes
        make_step([1, 2], [3], game_idx=1, turn=0),
    ]
    assert lrn.drop_too_long(batch) == [batch[2]]
    assert lrn.update(batch)["steps_too_long"] == 2.0


def test_checkpoint_is_complete_pickle_free_and_reloads(learner, tiny_model, tmp_path):
    learner.update(BATCH)
    learner.update(BATCH)
    path = learner.save_checkpoint()
    assert path == tmp_path / "run" / "checkpoints" / "step-2"
    files = sorted(os.listdir(path))
    assert {
        "adapter_config.json",
        "adapter_model.safetensors",
        "optimizer.safetensors",
        "learner_state.json",
    } <= set(files)
    assert all(f.endswith((".json", ".safetensors", ".md")) for f in files), files
    assert not any(p.name.endswith(".tmp") for p in path.parent.iterdir())
    state = json.loads((path / "learner_state.json").read_text())
    assert state["step"] == 2 and state["config"]["lora_config"]["lora_rank"] == 4

    fresh = SumLogprobLearner.create(
        tiny_model,
        device="cpu",
        run_dir=tmp_path / "other",
        learning_rate=1e-2,
        lora_config={"lora_rank": 4},
        seed=7,
    )
    fresh.initialize_algorithm()
    fresh.load_checkpoint(path)
    assert fresh.step == 2
    tokens = learner.collate(BATCH)
    with torch.no_grad():
        assert torch.equal(learner.policy_logits(tokens), fresh.policy_logits(tokens))
    # the optimizer continues identically: one more update on each gives identical weights
    learner.update(BATCH)
    fresh.update(BATCH)
    for (name, a), (_, b) in zip(
        learner.model.named_parameters(), fresh.model.named_parameters(), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-7), name


def test_checkpoint_loads_as_a_plain_peft_adapter(learner, tiny_model):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    learner.update(BATCH)
    path = learner.save_checkpoint()
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, str(path)).eval()
    tokens = learner.collate(BATCH)
    with torch.no_grad():
        expected = learner.policy_logits(tokens)
        got = peft_model(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask).logits
    assert torch.allclose(expected, got, atol=1e-5)


def test_load_checkpoint_refuses_a_different_lora_shape(learner, tiny_model, tmp_path):
    path = learner.save_checkpoint()
    other = SumLogprobLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path / "o", lora_config={"lora_rank": 8}
    )
    with pytest.raises(UnstableError, match="initialize_algorithm"):
        other.load_checkpoint(path)
    other.initialize_algorithm()
    with pytest.raises(UnstableError, match="lora_config"):
        other.load_checkpoint(path)
    with pytest.raises(UnstableError, match="missing"):
        other.load_checkpoint(tmp_path / "nowhere")


def test_a_checkpoint_with_the_old_setting_names_still_loads(learner, tiny_model, tmp_path):
    """learner_state.json written before LearnerConfig took the run's names (`lora_cfg`, `grad_clip`, as at
    f656d78): a resumed run of then still loads, and a different LoRA shape is still refused."""
    path = learner.save_checkpoint()
    state = json.loads((path / "learner_state.json").read_text())
    config = state["config"]
    config["lora_cfg"], config["grad_clip"] = config.pop("lora_config"), config.pop("gradient_clipping")
    (path / "learner_state.json").write_text(json.dumps(state))
    same = SumLogprobLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path / "s", lora_config={"lora_rank": 4}
    )
    same.initialize_algorithm()
    same.load_checkpoint(path)
    other = SumLogprobLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path / "o", lora_config={"lora_rank": 8}
    )
    other.initialize_algorithm()
    with pytest.raises(UnstableError, match="checkpoint .* has lora_config .*'lora_rank': 4"):
        other.load_checkpoint(path)


def test_saving_the_same_step_twice_replaces_the_folder(learner):
    first = learner.save_checkpoint()
    second = learner.save_checkpoint()
    assert first == second and (second / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in second.parent.iterdir()) == ["step-0"]


def test_gradient_checkpointing_recomputes_layers_without_changing_gradients(tiny_model, tmp_path):
    grads = {}
    for on in (True, False):
        lrn = SumLogprobLearner.create(
            tiny_model,
            device="cpu",
            run_dir=tmp_path,
            gradient_checkpointing=on,
            mini_batch_size=2,
            lora_config={"lora_rank": 4},
            seed=5,
        )
        lrn.initialize_algorithm()
        layers = [m for m in lrn.model.modules() if hasattr(m, "gradient_checkpointing")]
        assert layers and all(m.gradient_checkpointing == on for m in layers)
        grads[on] = _grads_at_step(lrn, BATCH)
    for a, b in zip(grads[True], grads[False], strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-8)


def soft_capped_model(folder) -> str:
    """A tiny random Gemma 2 (SmolLM2's tokenizer) whose logits are soft-capped at 0.5."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from unstable_core.model_loading import DEFAULT_MODEL, load_tokenizer

    tok = load_tokenizer(DEFAULT_MODEL)
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = Gemma2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        final_logit_softcapping=0.5,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = Gemma2ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(50.0)  # logits of several units, which the cap squeezes into +-0.5
    model.save_pretrained(folder)
    return str(folder)


def test_soft_capped_logits_are_not_recomputed_from_the_head(tmp_path):
    """A model that soft-caps its logits (Gemma 2) is trained on its own logits: recomputing the head from
    the hidden state would skip the cap and read as an off-policy gap."""
    from transformers import AutoModelForCausalLM

    from unstable_core.model_loading import plain_linear_head

    path = soft_capped_model(tmp_path / "gemma2")
    assert not plain_linear_head(AutoModelForCausalLM.from_pretrained(path))
    lrn = SumLogprobLearner.create(path, device="cpu", run_dir=tmp_path / "run", temperature=0.7)
    lrn.initialize_algorithm()
    tokens = lrn.collate([make_step([1, 2, 3, 4], [5, 6, 7]), make_step([1, 2], [8, 9, 10, 11, 12])])
    with torch.no_grad():
        got = lrn.policy_logprobs(tokens)
        full = lrn.completion_logprobs(lrn.policy_logits(tokens), tokens)
        uncapped = lrn.model.get_base_model().lm_head(
            lrn.model.get_base_model().get_decoder()(input_ids=tokens.input_ids).last_hidden_state
        )
    assert torch.allclose(got, full, atol=1e-5)
    assert not torch.allclose(full, lrn.completion_logprobs(uncapped, tokens), atol=1e-2)


def test_plain_llama_head_is_recomputed_in_fp32(tiny_model):
    from transformers import AutoModelForCausalLM

    from unstable_core.model_loading import plain_linear_head

    assert plain_linear_head(AutoModelForCausalLM.from_pretrained(tiny_model))


def test_a_bf16_backend_samples_soft_capped_logits_as_the_learner_trains_them(tmp_path):
    """The bf16 backend's float32 head is skipped for a soft-capping model too: behaviour and learner
    log-probs agree (without the cap on the backend's side they differ by far more)."""
    path = soft_capped_model(tmp_path / "gemma2")
    steps = sampled_steps(path, temperature=0.7, dtype=torch.bfloat16)
    lrn = SumLogprobLearner.create(path, device="cpu", run_dir=tmp_path / "run", temperature=0.7)
    lrn.initialize_algorithm()
    assert lrn.update(steps)["off_policy/max_abs_log_ratio"] < 0.05
