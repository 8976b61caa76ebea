"""PPO: the clipped surrogate per token on r = pi_T / mu, several epochs and mini-batches per batch.

mu is the behaviour log-prob the backend recorded when sampling (where none was recorded, pi_old's: the
policy's own before the update, from one gradient-free pass before epoch 0). pi_T is the policy tempered
like the sampler, as REINFORCE computes it, so with one epoch and on-policy data (r = 1) the gradient is
REINFORCE's.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

from unstable_core.errors import ConfigError
from unstable_core.learners import BaseLearner, TokenBatch
from unstable_core.types import Step
from unstable_ppo.fixed import FixedLogprobs, recorded
from unstable_ppo.loss import clipped_surrogate, k3_kl, ppo_loss


def _unit_open(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ConfigError(f"ppo {attribute.name} must be in (0, 1), got {value!r}")


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not value > 0:
        raise ConfigError(f"ppo {attribute.name} must be > 0, got {value!r}")


def _positive_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"ppo {attribute.name} must be an integer >= 1, got {value!r}")


def _non_negative(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not value >= 0:
        raise ConfigError(f"ppo {attribute.name} must be >= 0, got {value!r}")


def split_evenly(items: list[Any], parts: int) -> list[list[Any]]:
    """`items` cut in order into `parts` runs whose sizes differ by at most one (numpy's array_split), the
    longer first; empty runs dropped (fewer items than parts): 5 into 4 is 2, 1, 1, 1."""
    size, extra = divmod(len(items), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [items[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]


@attrs.frozen
class PPOConfig:
    """PPO's options (`--algorithm-config`).

    - clip_low / clip_high = 0.2: the ratio is clipped to [1 - clip_low, 1 + clip_high] (PPO's 0.2 on both
      sides; DAPO's "clip higher" raises clip_high, e.g. 0.28, to keep exploring low-probability tokens).
    - epochs = 2, mini_batches = 1: passes over each batch and optimizer steps per pass (SPIRAL: 2 and 1).
    - kl_coef = 0: weight of the k3 KL to the base model (the backbone with the adapter disabled); SPIRAL
      uses none. entropy_coef = 0: weight of the entropy bonus.
    - filter_zero_advantage = False: drop steps whose advantage is exactly 0 before training (SPIRAL):
      they carry no policy gradient but would dilute the batch mean.
    """

    clip_low: float = attrs.field(default=0.2, validator=_unit_open)
    clip_high: float = attrs.field(default=0.2, validator=_positive)
    epochs: int = attrs.field(default=2, validator=_positive_int)
    mini_batches: int = attrs.field(default=1, validator=_positive_int)
    kl_coef: float = attrs.field(default=0.0, validator=_non_negative)
    entropy_coef: float = attrs.field(default=0.0, validator=_non_negative)
    filter_zero_advantage: bool = False


@attrs.define
class PPOStats:
    """Token sums over every epoch of one update, reported as `ppo/...` means by `metrics()`."""

    tokens: int = 0
    clipped_low: int = 0  # A < 0 and r < 1 - clip_low: the clip binds, the token gets no gradient
    clipped_high: int = 0  # A > 0 and r > 1 + clip_high
    ratio: float = 0.0
    ratio_max: float = 0.0
    approx_kl: float = 0.0  # k3 of KL(mu || pi), as CleanRL's approx_kl
    entropy: float = 0.0
    kl_to_base: float = 0.0

    def add(
        self,
        logp: Any,
        old_logp: Any,
        advantages: Any,
        mask: Any,
        entropy: Any,
        ref_logp: Any,
        cfg: PPOConfig,
    ) -> None:
        """Add one micro-batch ([B, T-1] tensors, advantages [B], mask bool)."""
        if not bool(mask.any()):
            return
        log_r = (logp.detach() - old_logp).double()
        r = log_r.exp()
        adv = advantages.unsqueeze(-1).expand_as(r)
        self.tokens += int(mask.sum())
        self.clipped_low += int(((adv < 0) & (r < 1 - cfg.clip_low) & mask).sum())
        self.clipped_high += int(((adv > 0) & (r > 1 + cfg.clip_high) & mask).sum())
        self.ratio += float(r[mask].sum())
        self.ratio_max = max(self.ratio_max, float(r[mask].max()))
        self.approx_kl += float(((r - 1) - log_r)[mask].sum())
        self.entropy += float(entropy.detach()[mask].sum())
        if ref_logp is not None:
            self.kl_to_base += float(k3_kl(logp.detach(), ref_logp)[mask].sum())

    def metrics(self, with_kl_to_base: bool) -> dict[str, float]:
        n = max(self.tokens, 1)
        out = {
            "ppo/clip_fraction_low": self.clipped_low / n,
            "ppo/clip_fraction_high": self.clipped_high / n,
            "ppo/clip_fraction": (self.clipped_low + self.clipped_high) / n,
            "ppo/ratio_mean": self.ratio / n if self.tokens else 1.0,
            "ppo/ratio_max": self.ratio_max if self.tokens else 1.0,
            "ppo/approx_kl": self.approx_kl / n,
            "ppo/entropy": self.entropy / n,
        }
        if with_kl_to_base:
            out["ppo/kl_to_base"] = self.kl_to_base / n
        return out


class PPOLearner(BaseLearner):
    """PPO-clip with the step's shaped reward as advantage (baselines come from the reward transforms)."""

    buffer_kind = "step"

    def initialize_algorithm(self, **kwargs: Any) -> None:
        """Set clip_low, clip_high, epochs, mini_batches, kl_coef, entropy_coef, filter_zero_advantage."""
        self.ppo: PPOConfig = self.accept_algorithm_kwargs(PPOConfig, kwargs)
        if self.config.importance_cap is not None:
            raise ConfigError(
                "ppo clips the importance ratio itself; drop --importance-cap (it is for reinforce and a2c)"
            )
        self._epoch = 0
        self._filtered = 0
        self._stats = PPOStats()
        self._old = FixedLogprobs("pi_old")
        self._base = FixedLogprobs("base")

    def prepare_batch(self, batch: list[Step]) -> list[Step]:
        """SPIRAL's filter: without the steps whose advantage is exactly 0, when filter_zero_advantage."""
        kept = [s for s in batch if s.reward != 0.0] if self.ppo.filter_zero_advantage else batch
        self._filtered = len(batch) - len(kept)
        return kept

    def optimize(self, samples: list[Step]) -> dict[str, float]:
        """`epochs` passes over the batch, each shuffled and cut evenly into `mini_batches` optimizer steps
        (fewer only when the batch has fewer samples than that)."""
        self._stats = PPOStats()
        per_step: list[dict[str, float]] = []
        rng = random.Random(self.config.seed * 1_000_003 + self.step)
        order = list(samples)
        self.fix_logprobs(samples)
        for epoch in range(self.ppo.epochs if samples else 0):
            self._epoch = epoch
            if self.ppo.mini_batches > 1:
                rng.shuffle(order)
            per_step += [self.optimizer_step(part) for part in split_evenly(order, self.ppo.mini_batches)]
        self._old, self._base = FixedLogprobs("pi_old"), FixedLogprobs("base")  # this update's: free them
        metrics: dict[str, float] = {}
        for key in {k for m in per_step for k in m}:
            values = [m[key] for m in per_step if key in m]
            metrics[key] = sum(values) if key == "skipped_nonfinite" else sum(values) / len(values)
        metrics.update(self._stats.metrics(with_kl_to_base=self.ppo.kl_coef > 0))
        metrics["ppo/optimizer_steps"] = float(len(per_step))
        metrics["ppo/zero_advantage_filtered"] = float(self._filtered)
        return metrics

    def fix_logprobs(self, samples: list[Step]) -> None:
        """Before the update's first optimizer step: pi_old of the steps with no recorded behaviour log-probs
        and, with a KL term, every step's base log-probs (the base never changes: once per update, not per
        optimizer step)."""
        self._old, self._base = FixedLogprobs("pi_old"), FixedLogprobs("base")
        unrecorded = [s for s in samples if not recorded(s)]
        self._old.fill(unrecorded, self.policy_logprobs, self.collate, self.config.mini_batch_size)
        if self.ppo.kl_coef > 0:
            self._base.fill(samples, self.base_logprobs, self.collate, self.config.mini_batch_size)

    def base_logprobs(self, tokens: TokenBatch) -> Any:
        """[B, T-1] tempered log-probs of the base model: the same backbone with the adapter disabled."""
        import torch

        with torch.no_grad(), self.model.disable_adapter():
            return self.policy_logprobs(tokens)

    def _update(self, batch: list[Step], scale: float) -> dict[str, float]:
        """Forward one micro-batch, backward its scaled PPO loss, return its metrics."""
        import torch

        tokens = self.collate(batch)
        mask = tokens.target_mask
        logp, entropy = self.policy_logprobs(tokens, entropy=True)  # [B, T-1] each, 0 off the completion
        if not self.ppo.entropy_coef:
            entropy = entropy.detach()  # a metric only: frees its graph (a [N, vocab] tensor) at once
        if self._epoch == 0:  # how off-policy the data was (later mini-batches: plus this epoch's own steps)
            self.record_off_policy(logp, tokens)
        pi_old = self._old.batch(batch, logp.detach(), wanted=[not recorded(s) for s in batch])
        old = torch.where(tokens.behaviour_mask, tokens.behaviour_logprobs, pi_old)  # mu, else pi_old
        ref = self._base.batch(batch, logp.detach()) if self.ppo.kl_coef > 0 else None  # [B, T-1]
        advantages = torch.tensor([s.reward for s in batch], dtype=torch.float32, device=self.device)
        loss = ppo_loss(
            logp,
            old,
            advantages,
            mask,
            max_generation_len=self.config.max_generation_len,
            clip_low=self.ppo.clip_low,
            clip_high=self.ppo.clip_high,
            kl_coef=self.ppo.kl_coef,
            ref_logp=ref,
            entropy_coef=self.ppo.entropy_coef,
            entropy=entropy,
        )
        (loss * scale).backward()
        self._stats.add(logp, old, advantages, mask, entropy, ref, self.ppo)

        n_tokens = mask.sum().clamp(min=1)
        with torch.no_grad():
            ratio = (logp - old).exp()
            surrogate = clipped_surrogate(ratio, advantages, self.ppo.clip_low, self.ppo.clip_high)
        return {
            "loss": loss.item(),
            "policy_loss": ((surrogate * mask).sum() / n_tokens).item(),
            "advantage_mean": advantages.mean().item(),
            "logprob_per_token": (logp.detach().sum() / n_tokens).item(),
            "completion_tokens": mask.sum(dim=-1).float().mean().item(),
        }
