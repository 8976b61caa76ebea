"""PPO's loss terms against values computed by hand: unclipped and clipped tokens on both sides, the
constant normaliser, the k3 KL term, the entropy bonus, and which tokens get a gradient."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from unstable_ppo.loss import clipped_surrogate, k3_kl, ppo_loss  # noqa: E402


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
        kl_coef=0.1, ref_logp=ref, entropy_coef=0.01, entropy=entropy,
    )  # fmt: skip
    assert loss.item() == pytest.approx((-0.5 * 2 + 0.1 * kl - 0.01 * 5.0) / 2)


def test_the_kl_gradient_pulls_towards_the_base():
    logp = torch.tensor([[-1.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-0.5]], dtype=torch.float64)  # the base gives the token more mass
    loss = ppo_loss(
        logp, logp.detach(), torch.zeros(1, dtype=torch.float64), torch.tensor([[True]]),
        max_generation_len=1, clip_low=0.2, clip_high=0.2, kl_coef=1.0, ref_logp=ref,
    )  # fmt: skip
    loss.backward()
    # d/dlogp [e^(ref - logp) - (ref - logp) - 1] = 1 - e^(ref - logp) = 1 - e^0.5 < 0: descent raises logp
    assert logp.grad.item() == pytest.approx(1 - math.exp(0.5))
