"""PPO's loss terms against values computed by hand: unclipped and clipped tokens on both sides, the dual
clip, the behaviour weight, the constant normaliser, the KL estimators (their exact expected gradients on a
6-token vocabulary), the entropy bonus, and which tokens get a gradient."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from unstable_ppo.loss import behaviour_weights, clipped_surrogate, k2_kl, k3_kl, ppo_loss  # noqa: E402


def _ratio(*values: float):
    return torch.tensor([list(values)], dtype=torch.float64)


@pytest.mark.parametrize(
    ("ratio", "advantage", "clip_high", "expected", "clipped"),
    [
        (1.1, 1.0, 0.2, -1.1, False),  # A > 0 inside the range: -r A
        (1.5, 1.0, 0.2, -1.2, True),  # A > 0, r > 1 + 0.2: -(1.2) A, the clip binds (high side)
        (1.5, 1.0, 0.28, -1.28, True),  # clip-higher: 1 + 0.28
        (0.5, 1.0, 0.2, -0.5, False),  # A > 0, r < 1 - 0.2: the unclipped -r A is the larger (pessimistic)
        (0.5, -2.0, 0.2, 1.6, True),  # A < 0, r < 1 - 0.2: -(0.8)(-2), the clip binds (low side)
        (1.5, -2.0, 0.2, 3.0, False),  # A < 0, r > 1 + 0.2: the unclipped -r A = 3 is the larger
        (0.9, -2.0, 0.2, 1.8, False),  # A < 0 inside the range
    ],
)
def test_clipped_surrogate_by_hand(ratio, advantage, clip_high, expected, clipped):
    r = _ratio(ratio).requires_grad_(True)
    loss = clipped_surrogate(r, torch.tensor([advantage], dtype=torch.float64), 0.2, clip_high)
    assert loss.item() == pytest.approx(expected)
    loss.sum().backward()
    # a clipped token has no gradient; an unclipped one has d(-r A)/dr = -A
    assert r.grad.item() == pytest.approx(0.0 if clipped else -advantage)


def test_ppo_loss_by_hand_with_mask_and_constant_normaliser():
    # step 0: A = +1, ratios e^0.1 (unclipped) and e^0.5 (clipped at 1.2); step 1: A = -1, ratio e^-0.5
    # (clipped at 0.8); masked positions hold garbage that must not count.
    logp = torch.tensor([[-1.0, -2.0, 7.0], [-3.0, 9.0, 9.0]], dtype=torch.float64)
    old = torch.tensor([[-1.1, -2.5, 0.0], [-2.5, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss = ppo_loss(logp, old, adv, mask, max_generation_len=4, clip_low=0.2, clip_high=0.2)
    step0 = (-math.exp(0.1) - 1.2) / 4
    step1 = 0.8 / 4  # -min(-e^-0.5, -0.8) = 0.8
    assert loss.item() == pytest.approx((step0 + step1) / 2)


def test_k3_kl_by_hand():
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -2.0]], dtype=torch.float64)
    # d = ref - logp = -0.5: e^-0.5 + 0.5 - 1 = 0.1065306597; d = 0: 0
    assert k3_kl(logp, ref)[0].tolist() == pytest.approx([math.exp(-0.5) - 0.5, 0.0])
    assert bool((k3_kl(torch.randn(50), torch.randn(50)) >= 0).all())


def test_ppo_loss_adds_kl_and_subtracts_entropy_by_hand():
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    old = logp.clone()  # ratio 1: surrogate -A per token
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    entropy = torch.tensor([[2.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True]])
    adv = torch.tensor([0.5], dtype=torch.float64)
    kl = (math.exp(-0.5) + 0.5 - 1) + (math.exp(1.0) - 1.0 - 1)  # 0.10653 + 0.71828
    loss = ppo_loss(
        logp, old, adv, mask, max_generation_len=2, clip_low=0.2, clip_high=0.2,
        kl_coef=0.1, ref_logp=ref, kl_estimator="k3", entropy_coef=0.01, entropy=entropy,
    )  # fmt: skip
    assert loss.item() == pytest.approx((-0.5 * 2 + 0.1 * kl - 0.01 * 5.0) / 2)
    k2 = 0.5 * (0.5**2 + 1.0**2)
    loss = ppo_loss(
        logp, old, adv, mask, max_generation_len=2, clip_low=0.2, clip_high=0.2,
        kl_coef=0.1, ref_logp=ref, entropy_coef=0.01, entropy=entropy,
    )  # fmt: skip
    assert loss.item() == pytest.approx((-0.5 * 2 + 0.1 * k2 - 0.01 * 5.0) / 2)  # k2, the default


@pytest.mark.parametrize("estimator", ["k2", "k3", "k1-reward"])
def test_the_kl_gradient_pulls_towards_the_base(estimator):
    logp = torch.tensor([[-1.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-0.5]], dtype=torch.float64)  # the base gives the token more mass
    loss = ppo_loss(
        logp, logp.detach(), torch.zeros(1, dtype=torch.float64), torch.tensor([[True]]),
        max_generation_len=1, clip_low=0.2, clip_high=0.2, kl_coef=1.0, ref_logp=ref, kl_estimator=estimator,
    )  # fmt: skip
    loss.backward()
    # k3: 1 - e^(ref - logp) = 1 - e^0.5; k2: logp - ref = -0.5; k1-reward: the advantage -(logp - ref) = 0.5
    # times d(-A r)/dlogp = -A: -0.5. Each < 0: descent raises logp.
    expected = {"k3": 1 - math.exp(0.5), "k2": -0.5, "k1-reward": -0.5}[estimator]
    assert logp.grad.item() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("ratio", "advantage", "dual_clip", "expected", "grad"),
    [
        (50.0, -1.0, 3.0, 3.0, 0.0),  # A < 0, r = 50: the loss is capped at 3 |A|, no gradient
        (50.0, -1.0, None, 50.0, 1.0),  # without the dual clip: loss and gradient grow with r
        (2.0, -1.0, 3.0, 2.0, 1.0),  # below the cap: the ordinary clipped surrogate
        (5.0, -2.0, 3.0, 6.0, 0.0),  # the cap scales with |A|
        (50.0, 1.0, 3.0, -1.2, 0.0),  # A > 0: the dual clip never applies
    ],
)
def test_dual_clip_caps_the_loss_of_negative_advantages(ratio, advantage, dual_clip, expected, grad):
    r = _ratio(ratio).requires_grad_(True)
    loss = clipped_surrogate(r, torch.tensor([advantage], dtype=torch.float64), 0.2, 0.2, dual_clip)
    assert loss.item() == pytest.approx(expected)
    loss.sum().backward()
    assert r.grad.item() == pytest.approx(grad)


def test_the_default_ppo_options_dual_clip_at_3():
    from unstable_ppo.learner import PPOConfig

    cfg = PPOConfig()
    assert cfg.dual_clip == 3.0 and cfg.behaviour_weight_cap == 2.0 and cfg.kl_estimator == "k2"
    logp = torch.tensor([[math.log(50.0)]], dtype=torch.float64, requires_grad=True)
    loss = ppo_loss(
        logp, torch.zeros(1, 1, dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64),
        torch.tensor([[True]]), max_generation_len=1, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
        dual_clip=cfg.dual_clip,
    )  # fmt: skip
    loss.backward()
    assert loss.item() == pytest.approx(3.0) and logp.grad.item() == 0.0


def test_the_behaviour_weight_is_truncated_detached_and_scales_the_surrogate():
    old = torch.tensor([[-1.0, -1.0, -1.0]], dtype=torch.float64)
    mu = torch.tensor([[-2.0, -0.5, 0.0]], dtype=torch.float64)  # pi_old / mu = e, e^-0.5, (unrecorded)
    recorded = torch.tensor([[True, True, False]])
    w = behaviour_weights(old, mu, recorded, 2.0)
    assert w[0].tolist() == pytest.approx([2.0, math.exp(-0.5), 1.0])
    logp = old.clone().requires_grad_(True)  # r = 1
    loss = ppo_loss(
        logp, old, torch.tensor([1.0], dtype=torch.float64), torch.tensor([[True, True, True]]),
        max_generation_len=1, clip_low=0.2, clip_high=0.2, dual_clip=3.0, behaviour_weight=w,
    )  # fmt: skip
    loss.backward()
    assert loss.item() == pytest.approx(-(2.0 + math.exp(-0.5) + 1.0))
    assert logp.grad[0].tolist() == pytest.approx([-2.0, -math.exp(-0.5), -1.0])  # -A w_t per token


# The KL estimators' expected gradients, exactly: one token drawn from a 6-token vocabulary, the policy
# softmax(theta), the expectation a sum over the vocabulary weighted by the sampler's probabilities.
VOCAB = 6


def _policy_and_base():
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(VOCAB, dtype=torch.float64, generator=gen).requires_grad_(True)
    base = torch.randn(VOCAB, dtype=torch.float64, generator=gen).log_softmax(-1)
    return theta, base


def _expected_loss_gradient(theta, base, estimator, sampler_logp=None):
    """E_{y ~ mu}[d loss(y) / d theta] with pi_old = pi (the update's first step) and mu = pi by default."""
    pi_old = theta.detach().log_softmax(-1)
    mu = pi_old if sampler_logp is None else sampler_logp
    mask = torch.tensor([[True]])
    total = torch.zeros(VOCAB, dtype=torch.float64)
    for y in range(VOCAB):
        logp = theta.log_softmax(-1)[y].reshape(1, 1)
        old, ref, behaviour = (t[y].reshape(1, 1) for t in (pi_old, base, mu))
        loss = ppo_loss(
            logp, old, torch.zeros(1, dtype=torch.float64), mask, max_generation_len=1, clip_low=0.2,
            clip_high=0.2, dual_clip=3.0, behaviour_weight=behaviour_weights(old, behaviour, mask, 1e9),
            kl_coef=1.0, ref_logp=ref, kl_estimator=estimator,
        )  # fmt: skip
        (grad,) = torch.autograd.grad(loss, theta)
        total += mu[y].exp() * grad
    return total


def _kl_gradients(theta, base):
    """The exact gradients of KL(pi || base) and KL(base || pi) with respect to theta."""
    logp = theta.log_softmax(-1)
    (forward,) = torch.autograd.grad((logp.exp() * (logp - base)).sum(), theta, retain_graph=True)
    (reverse,) = torch.autograd.grad((base.exp() * (base - logp)).sum(), theta)
    return forward, reverse


@pytest.mark.parametrize("off_policy", [False, True])
def test_k2_and_k1_reward_follow_kl_pi_base_and_k3_follows_kl_base_pi(off_policy):
    """On-policy, k3's expected gradient is that of KL(base || pi), not KL(pi || base) (what it estimates
    the value of); k2 and k1-in-the-reward follow KL(pi || base). Off-policy (samples of another mu) the
    detached ratio pi / mu keeps each expectation."""
    theta, base = _policy_and_base()
    sampler = torch.randn(VOCAB, dtype=torch.float64).log_softmax(-1) if off_policy else None
    forward, reverse = _kl_gradients(theta, base)
    assert (forward - reverse).norm() > 0.1 * forward.norm()  # the two directions differ here
    for estimator in ("k2", "k1-reward"):
        got = _expected_loss_gradient(theta, base, estimator, sampler)
        assert torch.allclose(got, forward, atol=1e-12), (estimator, got, forward)
    got = _expected_loss_gradient(theta, base, "k3", sampler)
    assert torch.allclose(got, reverse, atol=1e-12) and not torch.allclose(got, forward, atol=1e-3)


def test_k2_is_half_the_squared_log_ratio():
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -2.0]], dtype=torch.float64)
    assert k2_kl(logp, ref)[0].tolist() == pytest.approx([0.125, 0.0])
