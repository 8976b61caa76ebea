"""REINFORCE: -A_i * sum_t w_t log pi_T(y_t | x, y_<t) / max_generation_len, on the exact sampled tokens.

pi_T is the policy tempered like the sampler; w_t = min(pi_T / mu, cap) with --importance-cap, else 1.
"""

from __future__ import annotations

from typing import Any

from unstable_core.learners import BaseLearner
from unstable_core.types import Step


def reinforce_loss(token_logprobs: Any, advantages: Any, max_generation_len: int) -> Any:
    """Batch mean of -A_i * sum_t log pi(y_t|x, y_<t) / max_generation_len (Dr. GRPO's constant normaliser).

    token_logprobs: [B, T-1], already 0 on prompt and padding (the learner passes w_t * log pi_T(y_t), w_t
    the detached truncated importance weight); advantages: [B].
    """
    seq_logprob = token_logprobs.sum(dim=-1)  # [B]: sum over completion tokens
    loss_i = -advantages * seq_logprob / max_generation_len  # [B]
    return loss_i.mean()


class REINFORCELearner(BaseLearner):
    """Policy gradient with the step's shaped reward as advantage (no baseline beyond the reward transforms)."""

    buffer_kind = "step"

    def _update(self, batch: list[Step], scale: float) -> dict[str, float]:
        """Forward one micro-batch, backward its scaled REINFORCE loss, return its metrics."""
        import torch

        tokens = self.collate(batch)
        logp = self.policy_logprobs(tokens)  # [B, T-1], 0 off the completion
        weights = self.importance_weights(logp, tokens)  # [B, T-1], no gradient; 1 without a cap
        advantages = torch.tensor([s.reward for s in batch], dtype=torch.float32, device=self.device)  # [B]
        loss = reinforce_loss(weights * logp, advantages, self.config.max_generation_len)
        (loss * scale).backward()

        n_tokens = tokens.target_mask.sum().clamp(min=1)
        return {
            "loss": loss.item(),
            "advantage_mean": advantages.mean().item(),
            "logprob_per_token": (logp.sum() / n_tokens).item(),
            "completion_tokens": tokens.target_mask.sum(dim=-1).float().mean().item(),
        }
