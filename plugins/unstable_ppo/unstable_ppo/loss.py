"""PPO's loss terms, per token, as pure functions of tensors (checked by hand in the tests).

Decoupled PPO (AReaL's objective): the trust region is centred on pi_old, the learner's own policy at the
start of the update, and the sampler mu is corrected by a truncated, detached importance weight. For a
completion token t of step i, with A_i the step's advantage:

    r_t         = pi(y_t) / pi_old(y_t)                                   (1 at the update's first step)
    w_t         = min(pi_old(y_t) / mu(y_t), behaviour_weight_cap)         (no gradient; 1 if mu unrecorded)
    surrogate_t = max(-A_i r_t, -A_i clip(r_t, 1 - clip_low, 1 + clip_high))
                  and, for A_i < 0, min(that, -dual_clip A_i)              (dual clip, verl's clip_ratio_c)
    loss        = mean_i sum_t (w_t surrogate_t + kl_coef kl_t - entropy_coef H_t) / max_generation_len

The KL to the base, d_t = log pi(y_t) - log base(y_t), by `kl_estimator` (each a per-token estimator; the
gradients below are expectations over the policy's own samples at each context):

    k2         kl_t = sg(w_t r_t) d_t^2 / 2          gradient of KL(pi || base)      (the default)
    k3         kl_t = sg(w_t r_t) (e^-d_t + d_t - 1)  gradient of KL(base || pi), the reverse direction
    k1-reward  no loss term: A_i - kl_coef sg(log pi_old - log base) is the token's advantage in the
               surrogate: gradient of KL(pi || base), clipped like the rest of the surrogate

sg(w_t r_t) ~ pi / mu reweights the samples of mu to the policy's, so off-policy data keeps the same
expected gradient (it is 1 on-policy).
"""

from __future__ import annotations

from typing import Any

from unstable_core.learners.off_policy import importance_weights

KL_ESTIMATORS = ("k2", "k3", "k1-reward")


def clipped_surrogate(
    ratio: Any, advantages: Any, clip_low: float, clip_high: float, dual_clip: float | None = None
) -> Any:
    """[B, T-1] per-token -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A), capped at dual_clip |A| where
    A < 0 (without the cap a negative token's loss, and gradient, grows with r without bound). ratio
    [B, T-1]; advantages [B] (one per step) or [B, T-1] (one per token)."""
    adv = advantages if advantages.dim() == ratio.dim() else advantages.unsqueeze(-1)  # [B, 1] or [B, T-1]
    surrogate = (-adv * ratio).maximum(-adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    if dual_clip is None:
        return surrogate
    return surrogate.where(adv >= 0, surrogate.minimum(-dual_clip * adv))


def behaviour_weights(old_logp: Any, behaviour_logp: Any, behaviour_mask: Any, cap: float) -> Any:
    """[B, T-1] w = min(pi_old / mu, cap), no gradient; 1 where mu was not recorded (pi_old sampled)."""
    return importance_weights(old_logp, behaviour_logp, behaviour_mask, cap)


def k3_kl(logp: Any, ref_logp: Any) -> Any:
    """[B, T-1] k3 = exp(ref - logp) - (ref - logp) - 1 (>= 0): its value estimates KL(pi || ref) on pi's
    samples, its gradient is that of KL(ref || pi)."""
    d = ref_logp - logp
    return d.exp() - d - 1.0


def k2_kl(logp: Any, ref_logp: Any) -> Any:
    """[B, T-1] k2 = (logp - ref)^2 / 2: on pi's samples its gradient is that of KL(pi || ref)."""
    return 0.5 * (logp - ref_logp).square()


def kl_penalty(logp: Any, ref_logp: Any, estimator: str) -> Any:
    """[B, T-1] the loss-side KL estimator `estimator` ("k2" or "k3") per token."""
    if estimator == "k2":
        return k2_kl(logp, ref_logp)
    if estimator == "k3":
        return k3_kl(logp, ref_logp)
    raise ValueError(f"{estimator!r} is not a loss-side KL estimator; use k2 or k3")


def constant_normalised_mean(per_token: Any, mask: Any, max_generation_len: int) -> Any:
    """mean_i sum_t mask * x / max_generation_len: Dr. GRPO's constant normaliser (no length bias), as REINFORCE."""
    return ((per_token * mask).sum(dim=-1) / max_generation_len).mean()


def token_advantages(
    advantages: Any, old_logp: Any, ref_logp: Any = None, kl_coef: float = 0.0, kl_estimator: str = "k2"
) -> Any:
    """[B, T-1] each token's advantage: its step's A_i, minus kl_coef (log pi_old - log base) with k1-reward."""
    adv = advantages.unsqueeze(-1).expand_as(old_logp)  # [B, T-1]
    if kl_coef and kl_estimator == "k1-reward":
        adv = adv - kl_coef * (old_logp - ref_logp).detach()
    return adv


def ppo_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    *,
    max_generation_len: int,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
    behaviour_weight: Any = None,
    kl_coef: float = 0.0,
    ref_logp: Any = None,
    kl_estimator: str = "k2",
    entropy_coef: float = 0.0,
    entropy: Any = None,
) -> Any:
    """The scalar PPO loss of a micro-batch (see the module docstring); logp, old_logp (pi_old),
    behaviour_weight (w, None: 1), ref_logp, entropy and mask are [B, T-1] (mask: completion tokens),
    advantages [B]. Only logp (and entropy) carry a gradient."""
    old_logp = old_logp.detach()
    ratio = (logp - old_logp).exp()  # [B, T-1]
    w = 1.0 if behaviour_weight is None else behaviour_weight.detach()
    adv = token_advantages(advantages, old_logp, ref_logp, kl_coef, kl_estimator)
    per_token = w * clipped_surrogate(ratio, adv, clip_low, clip_high, dual_clip)
    if kl_coef and kl_estimator != "k1-reward":
        per_token = per_token + kl_coef * (w * ratio).detach() * kl_penalty(
            logp, ref_logp.detach(), kl_estimator
        )
    if entropy_coef:
        per_token = per_token - entropy_coef * entropy
    return constant_normalised_mean(per_token, mask, max_generation_len)
