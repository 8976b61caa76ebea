"""The PPO learner: one epoch on on-policy data is REINFORCE's gradient, the clip binds on both sides in a
real update, epochs and mini-batches, the zero-advantage filter, the KL to the adapter-disabled base,
options and registration."""

from __future__ import annotations

import math

import attrs
import pytest

torch = pytest.importorskip("torch")

from unstable_ppo.learner import PPOLearner, split_evenly  # noqa: E402

from unstable_core.errors import ConfigError, UnstableError  # noqa: E402
from unstable_core.types import Step  # noqa: E402

torch.set_num_threads(1)


def _batch(rewards=(1.0, -1.0, 0.5)) -> list[Step]:
    shapes = [([1, 2, 3, 4], [5, 6, 7]), ([1, 2], [8, 9, 10, 11, 12]), ([1, 2, 3, 4, 5], [8])]
    return [
        Step(pid=0, env_id="t", obs="", act="", prompt_ids=p, completion_ids=c, reward=r, game_idx=i)
        for i, ((p, c), r) in enumerate(zip(shapes, rewards, strict=True))
    ]


def _make(cls, tiny_model, tmp_path, **algo):
    lrn = cls.create(
        tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4}, max_generation_len=8,
        learning_rate=1e-2, mini_batch_size=2, seed=0,
    )  # fmt: skip
    lrn.initialize_algorithm(**algo)
    torch.manual_seed(0)  # random LoRA B (peft starts it at 0) so the policy differs from the base model
    with torch.no_grad():
        for name, param in lrn.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    return lrn


def _on_policy(lrn, steps: list[Step]) -> list[Step]:
    """The steps with behaviour log-probs set to the learner's own: ratio 1 up to float rounding."""
    tokens = lrn.collate(steps)
    with torch.no_grad():
        logp = lrn.policy_logprobs(tokens)
    out = []
    for b, s in enumerate(steps):
        n_p, n = len(s.prompt_ids), len(s.prompt_ids) + len(s.completion_ids)
        out.append(attrs.evolve(s, logprobs=logp[b, n_p - 1 : n - 1].tolist()))
    return out


def _grads(lrn, steps: list[Step]) -> dict[str, torch.Tensor]:
    """The gradient of the update's mean loss before its first optimizer step."""
    lrn.model.zero_grad(set_to_none=True)
    samples = lrn.prepare_batch(steps)
    mbs = lrn.config.mini_batch_size
    if isinstance(lrn, PPOLearner):  # what optimize() does: fix pi_old, then forward each micro-batch
        micro_batches = lrn.fix_logprobs(samples)
    else:  # what optimizer_step() does
        micro_batches = [samples[lo : lo + mbs] for lo in range(0, len(samples), mbs)]
    for micro in micro_batches:
        lrn._update(micro, len(micro) / len(samples))
    return {n: p.grad.clone() for n, p in lrn.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("recorded", [True, False])
def test_one_epoch_on_policy_gradient_equals_reinforces(tiny_model, tmp_path, recorded):
    reinforce = pytest.importorskip("unstable_reinforce.learner")
    ppo = _make(PPOLearner, tiny_model, tmp_path / "ppo", epochs=1)
    ref = _make(reinforce.REINFORCELearner, tiny_model, tmp_path / "reinforce")
    for (n, p), (m, q) in zip(ppo.model.named_parameters(), ref.model.named_parameters(), strict=True):
        assert n == m and torch.equal(p, q)  # the same policy
    steps = _on_policy(ppo, _batch()) if recorded else _batch()  # unrecorded: pi_old = pi before the update
    g_ppo, g_ref = _grads(ppo, steps), _grads(ref, steps)
    assert g_ppo.keys() == g_ref.keys() and all("lora_" in n for n in g_ppo)
    assert any(g.abs().sum() > 0 for g in g_ref.values())
    for name in g_ref:
        assert torch.allclose(g_ppo[name], g_ref[name], rtol=1e-5, atol=1e-8), name


@pytest.mark.parametrize(("reward", "shift", "weight"), [(1.0, 1.0, 2.0), (-1.0, -1.0, math.exp(-1.0))])
def test_a_stale_or_shifted_mu_moves_the_behaviour_weight_not_the_clip(
    tiny_model, tmp_path, reward, shift, weight
):
    """mu = pi * e^-shift, as after two versions of lag or a sampler with other numerics: the ratio pi/mu is
    e (A > 0) or e^-1 (A < 0), so the old objective clipped every token before the learner had moved
    (gradient 0). Decoupled: r = pi / pi_old = 1, and w = min(pi_old / mu, 2) scales the gradient, as
    REINFORCE's default importance cap (2) does."""
    steps = _on_policy(_make(PPOLearner, tiny_model, tmp_path / "mu"), _batch((reward,) * 3))
    for s in steps:
        s.logprobs = [lp - shift for lp in s.logprobs]
    metrics = _make(PPOLearner, tiny_model, tmp_path / "update", epochs=1).update(steps)
    assert metrics["grad_norm"] > 0 and metrics["ppo/clip_fraction"] == 0.0  # before: 0 and 1
    assert metrics["ppo/ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # pi / pi_old, not pi / mu
    assert metrics["ppo/behaviour_ratio_mean"] == pytest.approx(math.exp(shift), rel=1e-4)
    assert metrics["ppo/behaviour_ratio_max"] == pytest.approx(math.exp(shift), rel=1e-4)
    assert metrics["ppo/behaviour_weight_mean"] == pytest.approx(weight, rel=1e-4)
    assert metrics["ppo/behaviour_truncated_fraction"] == (1.0 if shift > 0 else 0.0)
    assert metrics["off_policy/log_ratio_mean"] == pytest.approx(shift, abs=1e-4)  # pi_old against mu

    reinforce = pytest.importorskip("unstable_reinforce.learner")
    lrn = _make(PPOLearner, tiny_model, tmp_path / "ppo", epochs=1)
    g_ppo = _grads(lrn, steps)
    capped = _make(reinforce.REINFORCELearner, tiny_model, tmp_path / "reinforce")  # its default cap: 2
    assert capped.config.importance_cap == 2.0
    g_ref = _grads(capped, steps)
    assert any(g.abs().sum() > 0 for g in g_ppo.values())
    for name in g_ref:  # one epoch of decoupled ppo is reinforce with truncated importance weights
        assert torch.allclose(g_ppo[name], g_ref[name], rtol=1e-4, atol=1e-8), name


def test_with_lora_dropout_pi_old_and_the_base_are_the_policy_without_dropout(tiny_model, tmp_path):
    """lora_dropout 0.5: pi_old, w and the base's log-probs come from eval-mode passes, the same on every
    call (a train-mode pi_old was one dropout mask's, off by up to e^0.4 from the policy at dropout 0.1);
    the model is back in train mode for the loss."""
    lrn = PPOLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4, "lora_dropout": 0.5},
        max_generation_len=8, mini_batch_size=4, seed=0,
    )  # fmt: skip
    lrn.initialize_algorithm(epochs=1, kl_coef=0.5)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in lrn.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    tokens = lrn.collate(_batch())
    lrn.model.eval()
    with torch.no_grad():
        policy = lrn.policy_logprobs(tokens)
        with lrn.model.disable_adapter():
            base = lrn.policy_logprobs(tokens)
    lrn.model.train()
    steps = []
    for b, s in enumerate(_batch()):  # mu recorded from the policy itself: w = 1
        n_p, n = len(s.prompt_ids), len(s.prompt_ids) + len(s.completion_ids)
        steps.append(attrs.evolve(s, logprobs=policy[b, n_p - 1 : n - 1].tolist()))
    for _ in range(2):
        (micro,) = lrn.fix_logprobs(steps)
        fixed, mask = lrn._layout.get(micro), tokens.target_mask
        assert torch.equal(fixed.old_logp, policy) and torch.equal(fixed.ref_logp, base)
        assert torch.allclose(fixed.weight[mask], torch.ones_like(policy[mask]), atol=1e-5)
        assert lrn.model.training
    metrics = lrn.update(steps)
    assert metrics["off_policy/max_abs_log_ratio"] < 1e-5 and metrics["ppo/behaviour_ratio_max"] < 1 + 1e-5


def test_the_clip_binds_on_the_learners_own_moves_within_an_update(tiny_model, tmp_path):
    """Recorded mu, several optimizer steps: later ones see r = pi / pi_old != 1 and the clip binds."""
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=3, mini_batches=2, clip_low=0.01, clip_high=0.01)
    metrics = lrn.update(_on_policy(lrn, _batch()))
    assert metrics["ppo/ratio_max"] > 1.0 and metrics["ppo/clip_fraction"] > 0


@pytest.mark.parametrize(("dual_clip", "stopped"), [(3.0, True), (None, False)])
def test_the_dual_clip_stops_negative_tokens_whose_ratio_ran_away(tiny_model, tmp_path, dual_clip, stopped):
    """A < 0 and r = pi / pi_old = e^4 (as after a run of optimizer steps that raised those tokens): with
    the dual clip the loss is capped at 3 |A| and gives no gradient; without it, the gradient grows with r."""
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=1, dual_clip=dual_clip)
    steps = _batch((-1.0,) * 3)
    lrn.model.zero_grad(set_to_none=True)
    for micro in lrn.fix_logprobs(steps):
        fixed = lrn._layout.get(micro)
        fixed.old_logp -= 4.0 * lrn.collate(micro).target_mask  # pi_old e^-4 times pi on the completions
        lrn._update(micro, len(micro) / len(steps))
    grads = [p.grad for n, p in lrn.model.named_parameters() if "lora_" in n and p.grad is not None]
    assert bool(sum(g.abs().sum() for g in grads) == 0) is stopped
    assert lrn._stats.metrics(False)["ppo/dual_clip_fraction"] == (1.0 if stopped else 0.0)


def test_epochs_and_mini_batches_are_optimizer_steps_of_one_policy_version(tiny_model, tmp_path):
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=2, mini_batches=2)
    steps = _on_policy(lrn, _batch())
    before = {n: p.detach().clone() for n, p in lrn.model.named_parameters()}
    metrics = lrn.update(steps)
    assert lrn.step == 1 and metrics["step"] == 1.0
    assert metrics["ppo/optimizer_steps"] == 4.0  # 2 epochs x 2 mini-batches
    changed = {n for n, p in lrn.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert (
        metrics["off_policy/tokens"] == 9.0
    )  # the batch's completion tokens, counted in the first epoch only
    assert metrics["ppo/ratio_max"] > 1.0  # later optimizer steps see a moved policy
    for key in ("ppo/approx_kl", "ppo/entropy", "ppo/clip_fraction_low", "ppo/clip_fraction_high", "loss"):
        assert key in metrics
    assert metrics["ppo/entropy"] > 0
    path = lrn.save_checkpoint()
    again = _make(PPOLearner, tiny_model, tmp_path / "again", epochs=2, mini_batches=2)
    again.load_checkpoint(path)
    assert again.step == 1


def test_without_recorded_logprobs_later_steps_keep_the_ratio_to_the_policy_before_the_update(
    tiny_model, tmp_path
):
    """pi_old comes from one pass before epoch 0: the second epoch sees r = pi_now / pi_old != 1 and can clip."""
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=3, mini_batches=2, clip_low=0.01, clip_high=0.01)
    steps = _batch()  # no behaviour log-probs recorded
    for micro in lrn.fix_logprobs(steps):
        tokens = lrn.collate(micro)
        with torch.no_grad():
            before = lrn.policy_logprobs(tokens)
        fixed, mask = lrn._layout.get(micro), tokens.target_mask
        assert torch.equal(fixed.old_logp[mask], before[mask]) and torch.equal(
            fixed.weight[mask], torch.ones_like(before[mask])
        )
    metrics = lrn.update(steps)
    assert metrics["ppo/optimizer_steps"] == 6.0
    assert metrics["ppo/ratio_max"] > 1.0 and metrics["ppo/approx_kl"] > 0  # were exactly 1 and 0
    assert metrics["ppo/clip_fraction"] > 0  # the trust region binds on the policy's own, moved, tokens
    assert metrics["off_policy/tokens"] == 0.0  # no behaviour log-probs: nothing to say how off-policy


def test_an_update_step_without_fixed_logprobs_is_refused(tiny_model, tmp_path):
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=1)
    with pytest.raises(UnstableError, match="not a micro-batch with fixed pi_old log-probs.*fix_logprobs"):
        lrn._update(_batch(), 1.0)
    steps = _batch()
    lrn.fix_logprobs(steps)  # micro-batches of 2 and 1 (mini_batch_size 2): the 3 steps are none of them
    with pytest.raises(UnstableError, match="not a micro-batch"):
        lrn._update(steps, 1.0)


@pytest.mark.parametrize(
    ("n", "parts", "sizes"),
    [(5, 4, [2, 1, 1, 1]), (8, 4, [2, 2, 2, 2]), (3, 4, [1, 1, 1]), (7, 1, [7]), (0, 2, [])],
)
def test_split_evenly_is_array_split_without_empty_parts(n, parts, sizes):
    items = list(range(n))
    split = split_evenly(items, parts)
    assert [len(p) for p in split] == sizes and [x for p in split for x in p] == items


def test_mini_batches_is_the_number_of_optimizer_steps_per_epoch(tiny_model, tmp_path):
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=1, mini_batches=4)
    # 5 steps: mini-batches of 2, 1, 1, 1 (ceil(5 / 4) = 2 a mini-batch made 3 optimizer steps)
    steps = _batch() + _batch((0.5, -0.5, 1.0))[:2]
    assert lrn.update(_on_policy(lrn, steps))["ppo/optimizer_steps"] == 4.0


def test_zero_advantage_steps_are_filtered(tiny_model, tmp_path):
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=1, filter_zero_advantage=True)
    metrics = lrn.update(_batch((1.0, 0.0, 0.0)))
    assert metrics["ppo/zero_advantage_filtered"] == 2.0 and metrics["ppo/optimizer_steps"] == 1.0
    assert metrics["completion_tokens"] == 3.0  # only the first step (3 completion tokens) was trained on
    before = {n: p.detach().clone() for n, p in lrn.model.named_parameters()}
    metrics = lrn.update(_batch((0.0, 0.0, 0.0)))  # nothing left: no optimizer step, still a version
    assert metrics["ppo/optimizer_steps"] == 0.0 and lrn.step == 2
    assert all(torch.equal(p, before[n]) for n, p in lrn.model.named_parameters())


def test_kl_to_the_base_uses_the_adapter_disabled_backbone(tiny_model, tmp_path):
    fresh = PPOLearner.create(
        tiny_model, device="cpu", run_dir=tmp_path / "fresh", lora_config={"lora_rank": 4}
    )
    fresh.initialize_algorithm()
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=1, kl_coef=0.5)
    tokens = lrn.collate(_batch())
    with torch.no_grad():
        base = fresh.policy_logprobs(tokens)  # a zero LoRA B: the base model itself
        policy = lrn.policy_logprobs(tokens)
    assert torch.allclose(lrn.base_logprobs(tokens), base, atol=1e-6)
    assert not torch.allclose(policy, base, atol=1e-3)  # the adapter is back on after the context
    mask = tokens.target_mask
    d = base - policy
    expected = float(((d.exp() - d - 1)[mask]).mean())
    metrics = lrn.update(_batch())
    assert metrics["ppo/kl_to_base"] == pytest.approx(expected, rel=1e-4)
    assert sum(1 for n, _ in lrn.model.named_parameters() if "lora_" in n) == sum(
        1 for n, _ in fresh.model.named_parameters() if "lora_" in n
    )  # no second adapter or model copy


def test_base_logprobs_are_computed_once_per_update_and_give_the_same_loss(tiny_model, tmp_path):
    from unstable_ppo.loss import behaviour_weights, ppo_loss

    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=2, mini_batches=2, kl_coef=0.5)
    steps = _on_policy(lrn, _batch())
    rows = []
    real = lrn.base_logprobs

    def counted(tokens):
        rows.append(tokens.input_ids.shape[0])
        return real(tokens)

    lrn.base_logprobs = counted
    lrn.update(steps)
    assert sum(rows) == len(steps)  # each step once, not once per optimizer step (2 epochs x 2 = 4 steps)

    for micro in lrn.fix_logprobs(steps):
        tokens = lrn.collate(micro)
        with torch.no_grad():
            logp = lrn.policy_logprobs(tokens)  # pi_old: the policy has not moved yet
            weight = behaviour_weights(logp, tokens.behaviour_logprobs, tokens.behaviour_mask, 2.0)
            expected = ppo_loss(
                logp, logp, torch.tensor([s.reward for s in micro]), tokens.target_mask,
                max_generation_len=8, clip_low=0.2, clip_high=0.2, dual_clip=3.0, behaviour_weight=weight,
                kl_coef=0.5, ref_logp=real(tokens), kl_estimator="k2",
            )  # fmt: skip
        assert lrn._update(micro, 1.0)["loss"] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clip_low": 1.0}, "clip_low must be a number in (0, 1)"),
        ({"clip_high": 0}, "clip_high must be a number > 0"),
        ({"epochs": 0}, "epochs must be an integer >= 1"),
        ({"mini_batches": 1.5}, "mini_batches must be an integer >= 1"),
        ({"kl_coef": -0.1}, "kl_coef must be a number >= 0"),
        ({"dual_clip": 1.0}, "dual_clip must be a number > 1 (or null: off)"),
        ({"behaviour_weight_cap": 0.5}, "behaviour_weight_cap must be a number >= 1"),
        ({"kl_estimator": "k4"}, "kl_estimator must be one of k2, k3, k1-reward"),
    ],
)
def test_bad_options_name_the_key(tiny_model, tmp_path, kwargs, message):
    lrn = PPOLearner.create(tiny_model, device="cpu", run_dir=tmp_path)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        lrn.initialize_algorithm(**kwargs)


def test_unknown_option_and_importance_cap_are_refused(tiny_model, tmp_path):
    with pytest.raises(UnstableError, match="unknown ppo option.*clip_range.*allowed: clip_low"):
        PPOLearner.create(tiny_model, device="cpu", run_dir=tmp_path).initialize_algorithm(clip_range=0.2)
    capped = PPOLearner.create(tiny_model, device="cpu", run_dir=tmp_path, importance_cap=2.0)
    with pytest.raises(ConfigError, match="drop --importance-cap"):
        capped.initialize_algorithm()


def test_plugin_registers_ppo():
    from unstable_core import plugins

    component = plugins.get_registry().get("learner", "ppo")
    assert component.dist == "unstable-ppo"
    assert component.load() is PPOLearner
    assert PPOLearner.buffer_kind == "step"


def test_ppo_passes_the_learning_check_and_fails_it_with_its_loss_sign_flipped(tmp_path):
    """SPIRAL's settings (2 epochs, zero-advantage filter) master the letter game; ascending the loss does not."""
    from unstable_core.testing.learning_check import GOAL, check_learner_learns, sign_flipped

    spiral = {"epochs": 2, "filter_zero_advantage": True}
    result = check_learner_learns(PPOLearner, tmp_path / "ppo", algorithm_kwargs=spiral)
    assert result.passed, result.summary()
    flipped = check_learner_learns(sign_flipped(PPOLearner), tmp_path / "flipped", algorithm_kwargs=spiral)
    assert not flipped.passed and max(flipped.rates) < GOAL, flipped.summary()


def test_entropy_is_the_tempered_policys_at_completion_positions(tiny_model, tmp_path):
    lrn = PPOLearner.create(tiny_model, device="cpu", run_dir=tmp_path, temperature=0.7)
    lrn.initialize_algorithm()
    tokens = lrn.collate(_batch())
    with torch.no_grad():
        logp, entropy = lrn.policy_logprobs(tokens, entropy=True)
        logits = lrn.policy_logits(tokens)[:, :-1].float() / 0.7  # [B, T-1, V]
    expected = torch.distributions.Categorical(logits=logits).entropy()
    mask = tokens.target_mask
    assert torch.allclose(entropy[mask], expected[mask], atol=1e-4)
    assert torch.equal(entropy[~mask], torch.zeros_like(entropy[~mask]))
    assert torch.allclose(logp, lrn.policy_logprobs(tokens).detach(), atol=1e-6)


def _varied_batch(n: int = 8, seed: int = 0) -> list[Step]:
    """Steps of random tokens whose lengths differ, so that micro-batches of different companions pad
    them to different widths."""
    import random

    rng = random.Random(seed)
    return [
        Step(
            pid=0,
            env_id="t",
            obs="",
            act="",
            game_idx=i,
            reward=rng.choice([-1.0, 1.0]),
            prompt_ids=[rng.randrange(100, 40_000) for _ in range(rng.randint(3, 40))],
            completion_ids=[rng.randrange(100, 40_000) for _ in range(rng.randint(2, 8))],
        )  # fmt: skip
        for i in range(n)
    ]


def test_bf16_logprobs_depend_on_the_layout(tiny_model, tmp_path):
    """What the PPO learner guards against: in bf16 a step's log-probs change with its micro-batch (alone
    or padded beside others), while the same layout forwarded twice gives exactly the same numbers."""
    lrn = _make(PPOLearner, tiny_model, tmp_path)
    lrn.model.to(torch.bfloat16)
    steps = _varied_batch()

    def rows(batch):
        tokens = lrn.collate(batch)
        with torch.no_grad():
            logp = lrn.policy_logprobs(tokens)
        return [logp[b][tokens.target_mask[b]] for b in range(len(batch))]

    alone = [rows([s])[0] for s in steps]
    padded = rows(steps)
    assert max(float((a - p).abs().max()) for a, p in zip(alone, padded, strict=True)) > 0
    assert all(torch.equal(p, q) for p, q in zip(padded, rows(steps), strict=True))


@pytest.mark.parametrize("recorded", [False, True])
def test_pi_old_and_pi_share_one_layout_in_bf16(tiny_model, tmp_path, monkeypatch, recorded):
    """A policy that does not move (optimizer steps disabled) must see r = pi / pi_old = 1 exactly in every
    epoch and mini-batch, in bf16 too: pi_old is computed on exactly the micro-batches the loss uses, and
    epochs reshuffle whole micro-batches (before: pi_old in the batch's order, the loss in a shuffled one,
    or mu itself where it was recorded)."""
    lrn = _make(PPOLearner, tiny_model, tmp_path, epochs=3, mini_batches=2)
    lrn.model.to(torch.bfloat16)
    for opt in lrn.optimizers.values():
        monkeypatch.setattr(opt, "step", lambda *args, **kwargs: None)
    steps = _varied_batch()
    if recorded:
        steps = _on_policy(lrn, steps)  # mu from one pass over the whole batch: another layout
    metrics = lrn.update(steps)
    assert metrics["ppo/optimizer_steps"] == 6.0 and metrics["grad_norm"] > 0
    assert metrics["ppo/ratio_mean"] == 1.0 and metrics["ppo/ratio_max"] == 1.0
    assert metrics["ppo/approx_kl"] == 0.0 and metrics["ppo/clip_fraction"] == 0.0
    if recorded:  # the layout gap moved the behaviour weight instead (bounded by its cap)
        assert 0 < metrics["off_policy/max_abs_log_ratio"] < 0.05


@pytest.fixture(scope="module")
def on_policy_result(tmp_path_factory):
    from unstable_core.testing.learning_check import check_learner_learns

    return check_learner_learns(PPOLearner, tmp_path_factory.mktemp("on-policy"))


@pytest.mark.parametrize(("lag", "mu_shift"), [(3, 0.0), (0, 1.0), (2, 0.5)])
def test_ppo_learns_from_stale_or_shifted_behaviour_logprobs_as_well_as_on_policy(
    tmp_path, on_policy_result, lag, mu_shift
):
    """Games played by the policy `lag` versions before the learner's, or recorded log-probs moved by
    +-mu_shift per token (a sampler with other numerics): the decoupled objective reaches the goal within
    one update of on-policy training."""
    from unstable_core.testing.learning_check import check_learner_learns

    assert on_policy_result.passed, on_policy_result.summary()
    result = check_learner_learns(PPOLearner, tmp_path, lag=lag, mu_shift=mu_shift)
    print(f"on-policy: {on_policy_result.summary()}\nlag {lag}, mu_shift {mu_shift}: {result.summary()}")
    assert result.passed, result.summary()
    assert result.updates_to_goal <= on_policy_result.updates_to_goal + 1, result.summary()
