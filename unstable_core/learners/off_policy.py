"""How far off-policy a batch is, and truncated importance weights.

For every sampled completion token, r = pi(y) / mu(y): pi is the policy being trained (tempered like the
sampler), mu the behaviour policy that sampled the token (its log-prob recorded by the backend). With no
policy lag and matching numerics r = 1 exactly; lag (asynchronous collection) and bf16 rounding move it.
KL(mu || pi) is estimated from mu's own samples with the k3 estimator, (r - 1) - log r (non-negative,
unbiased), as verl and TRL log it. The tokens sampled by the very policy being trained (lag 0) are also
reported apart (`on_policy_...`): there only numerics separate pi from mu, so their largest gap measures
the backend's log-prob contract inside a real run (1e-4 in fp32), whatever the rest of the batch's lag.
"""

from __future__ import annotations

from typing import Any

import attrs


def importance_weights(logp: Any, behaviour_logp: Any, mask: Any, cap: float | None) -> Any:
    """[B, T-1] truncated importance weights min(pi/mu, cap), gradient-free; 1 without a cap or where no
    behaviour log-prob was recorded (truncated IS, as verl's TIS, bounds the variance of stale steps)."""
    import torch

    if cap is None:
        return torch.ones_like(logp)
    ratio = torch.exp(logp.detach() - behaviour_logp).clamp(max=cap)  # [B, T-1]
    return torch.where(mask, ratio, torch.ones_like(ratio))


@attrs.define
class OffPolicyStats:
    """Sums over the completion tokens of one update, reported as means by `metrics()`."""

    tokens: int = 0
    log_ratio: float = 0.0
    ratio: float = 0.0
    kl: float = 0.0
    max_abs_log_ratio: float = 0.0
    capped: int = 0
    on_policy_tokens: int = 0
    on_policy_max_abs_log_ratio: float = 0.0

    def add(
        self, logp: Any, behaviour_logp: Any, mask: Any, cap: float | None = None, fresh: Any = None
    ) -> None:
        """Add the tokens of one micro-batch: logp, behaviour_logp [B, T-1]; mask [B, T-1] bool; `fresh`
        [B] bool: rows the trained policy itself sampled (None: unknown)."""
        if not bool(mask.any()):
            return
        if fresh is not None and bool(fresh.any()):
            on_policy = (logp.detach() - behaviour_logp)[mask & fresh[:, None]]  # [N0]
            if on_policy.numel():
                self.on_policy_tokens += int(on_policy.numel())
                self.on_policy_max_abs_log_ratio = max(
                    self.on_policy_max_abs_log_ratio, float(on_policy.abs().max())
                )
        log_r = (logp.detach() - behaviour_logp)[mask].double()  # [N]
        r = log_r.exp()
        self.tokens += int(log_r.numel())
        self.log_ratio += float(log_r.sum())
        self.ratio += float(r.sum())
        self.kl += float(((r - 1) - log_r).sum())
        self.max_abs_log_ratio = max(self.max_abs_log_ratio, float(log_r.abs().max()))
        if cap is not None:
            self.capped += int((r > cap).sum())

    def metrics(self) -> dict[str, float]:
        """`off_policy/...`: ratio_mean, log_ratio_mean, max_abs_log_ratio, kl (k3), capped_fraction, tokens,
        and on_policy_max_abs_log_ratio and on_policy_tokens over the lag-0 tokens."""
        n = max(self.tokens, 1)
        return {
            "off_policy/ratio_mean": self.ratio / n if self.tokens else 1.0,
            "off_policy/log_ratio_mean": self.log_ratio / n,
            "off_policy/max_abs_log_ratio": self.max_abs_log_ratio,
            "off_policy/kl": self.kl / n,
            "off_policy/capped_fraction": self.capped / n,
            "off_policy/tokens": float(self.tokens),
            "off_policy/on_policy_max_abs_log_ratio": self.on_policy_max_abs_log_ratio,
            "off_policy/on_policy_tokens": float(self.on_policy_tokens),
        }
