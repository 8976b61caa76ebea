"""CISPO (MiniMax-M1): REINFORCE per completion token, each token's gradient weighted by its importance
ratio pi/mu clipped to [1 - eps_low, 1 + eps_high] and detached; a mean over the tokens of the update.

    loss = -sum_{i,t} sg(clip(pi_t / mu_t, 1 - eps_low, 1 + eps_high)) * A_i * log pi_t / T

A_i = step.reward, mu = Step.logprobs (the sampler's tempered log-prob; weight 1 where none was recorded),
pi the tempered policy (pi/mu = 1 on-policy), T the completion tokens of the whole update. The clip only
bounds a token's weight: unlike PPO's clipped surrogate it never removes a token's gradient.
"""

from __future__ import annotations

from typing import Any

import attrs

from unstable_core.config.validators import number_in, positive
from unstable_core.learners import BaseLearner
from unstable_core.types import Step


@attrs.frozen
class CISPOConfig:
    """CISPO's options (`--algorithm-config`)."""

    eps_low: float = attrs.field(
        default=1.0,
        validator=number_in(0.0, 1.0),
        metadata={
            "help": "the weight's lower bound is 1 - eps_low; 1 (none) as MiniMax-M1, which tunes only eps_high"
        },
    )
    eps_high: float = attrs.field(
        default=0.28,
        validator=positive,
        metadata={"help": "the weight's upper bound is 1 + eps_high (DAPO's clip-higher value, 0.28)"},
    )


def clipped_weights(
    logp: Any, behaviour_logp: Any, behaviour_mask: Any, eps_low: float, eps_high: float
) -> Any:
    """[B, T-1] clip(pi / mu, 1 - eps_low, 1 + eps_high) without gradient; 1 where mu was not recorded."""
    import torch

    ratio = (logp.detach() - behaviour_logp).exp()
    clipped = ratio.clamp(min=1.0 - eps_low, max=1.0 + eps_high)
    return torch.where(behaviour_mask, clipped, torch.ones_like(clipped))


def cispo_loss(logp: Any, weights: Any, advantages: Any, mask: Any, mean_tokens: float) -> Any:
    """Per-sample mean of each step's sum over its completion tokens of -w A log pi, divided by the update's
    mean completion length: times the micro-batch's scale, summed over the update, a mean over its tokens.
    logp, weights, mask [B, T-1]; advantages [B]."""
    per_token = -weights * advantages.unsqueeze(-1) * logp
    return ((per_token * mask).sum(dim=-1) / mean_tokens).mean()


class CISPOLearner(BaseLearner):
    """CISPO with the step's shaped reward as advantage (baselines come from the reward transforms)."""

    algorithm_config_class = CISPOConfig
    default_importance_cap = None  # the clipped weight is the loss's own
    own_importance_weight = "eps_low, eps_high in --algorithm-config"

    def initialize_algorithm(self, **kwargs: Any) -> None:
        """Set the options of `CISPOConfig`."""
        self.cispo: CISPOConfig = self.accept_algorithm_kwargs(CISPOConfig, kwargs)

    def prepare_batch(self, batch: list[Step]) -> list[Step]:
        """Count the update's completion tokens, for the loss's mean over them."""
        self.mean_tokens = sum(len(s.completion_ids) for s in batch) / len(batch)
        return batch

    def _update(self, batch: list[Step], scale: float) -> dict[str, float]:
        """Forward one micro-batch, backward its scaled CISPO loss, return its metrics."""
        import torch

        tokens = self.collate(batch)
        logp = self.policy_logprobs(tokens)  # [B, T-1], 0 off the completion
        pi = self.reference_logprobs(tokens) if self.has_dropout else logp  # the weight: no dropout noise
        self.record_off_policy(pi, tokens)
        cfg = self.cispo
        weights = clipped_weights(
            pi, tokens.behaviour_logprobs, tokens.behaviour_mask, cfg.eps_low, cfg.eps_high
        )
        advantages = torch.tensor([s.reward for s in batch], dtype=torch.float32, device=self.device)  # [B]
        mask = tokens.target_mask
        loss = cispo_loss(logp, weights, advantages, mask, self.mean_tokens)
        (loss * scale).backward()

        recorded = tokens.behaviour_mask & mask
        per_step = recorded.sum(dim=-1).clamp(min=1)
        ratio = (pi.detach() - tokens.behaviour_logprobs).exp()
        clipped = recorded & ((ratio < 1.0 - cfg.eps_low) | (ratio > 1.0 + cfg.eps_high))
        return {
            "loss": loss.item(),
            "advantage_mean": advantages.mean().item(),
            "cispo/weight_mean": ((weights * recorded).sum(dim=-1) / per_step).mean().item(),
            "cispo/clipped_fraction": (clipped.sum(dim=-1) / per_step).mean().item(),
        }
