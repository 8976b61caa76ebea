"""PPO-clip's loss terms, per token, as pure functions of tensors (checked by hand in the tests).

For a completion token t of step i, r_t = pi_T(y_t) / mu(y_t) and A_i the step's advantage:

    surrogate_t = max(-A_i r_t, -A_i clip(r_t, 1 - clip_low, 1 + clip_high))
    kl_t        = exp(ref_t - logp_t) - (ref_t - logp_t) - 1          (k3 estimator of KL(pi || base))
    loss        = mean_i sum_t (surrogate_t + kl_coef kl_t - entropy_coef H_t) / max_generation_len
"""

from __future__ import annotations

from typing import Any


def clipped_surrogate(ratio: Any, advantages: Any, clip_low: float, clip_high: float) -> Any:
    """[B, T-1] per-token -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) for ratio [B, T-1], advantages [B]."""
    adv = advantages.unsqueeze(-1)  # [B, 1]
    return (-adv * ratio).maximum(-adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))


def k3_kl(logp: Any, ref_logp: Any) -> Any:
    """[B, T-1] k3 estimate of KL(pi || ref) from pi's samples: exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    d = ref_logp - logp
    return d.exp() - d - 1.0


def constant_normalised_mean(per_token: Any, mask: Any, max_generation_len: int) -> Any:
    """mean_i sum_t mask * x / max_generation_len: Dr. GRPO's constant normaliser (no length bias), as REINFORCE."""
    return ((per_token * mask).sum(dim=-1) / max_generation_len).mean()


def ppo_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    max_generation_len: int,
    clip_low: float,
    clip_high: float,
    kl_coef: float = 0.0,
    ref_logp: Any = None,
    entropy_coef: float = 0.0,
    entropy: Any = None,
) -> Any:
    """The scalar PPO loss of a micro-batch (see the module docstring); logp, old_logp, ref_logp, entropy and
    mask are [B, T-1] (mask: completion tokens), advantages [B]. old_logp carries no gradient."""
    ratio = (logp - old_logp.detach()).exp()
    per_token = clipped_surrogate(ratio, advantages, clip_low, clip_high)
    if kl_coef:
        per_token = per_token + kl_coef * k3_kl(logp, ref_logp.detach())
    if entropy_coef:
        per_token = per_token - entropy_coef * entropy
    return constant_normalised_mean(per_token, mask, max_generation_len)
