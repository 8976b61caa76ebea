"""PPO, decoupled (AReaL's objective): the clipped surrogate per token on r = pi_T / pi_old, times the
truncated behaviour weight w = min(pi_old / mu, behaviour_weight_cap), several epochs and mini-batches per
batch.

pi_old is the learner's own policy at the start of the update, from one gradient-free pass over the
update's micro-batches in the layout the loss uses (see `fixed`); mu is the log-prob the backend recorded
when sampling (w = 1 where none was recorded). So the trust region is centred on the learner, and neither
policy lag nor a sampler whose numerics differ (bf16) counts against the clip: they move w, bounded by its
cap. pi_T is the policy tempered like the sampler, as REINFORCE computes it, so with one epoch and
on-policy data (r = w = 1) the gradient is REINFORCE's.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

from unstable_core.config.validators import (
    boolean,
    choice,
    count,
    non_negative_number,
    number_above,
    number_in,
    positive,
)
from unstable_core.learners import BaseLearner, TokenBatch
from unstable_core.types import Step
from unstable_ppo.fixed import Fixed, Layout, cut_micro_batches, split_evenly
from unstable_ppo.loss import (
    KL_ESTIMATORS,
    behaviour_weights,
    clipped_surrogate,
    k3_kl,
    ppo_loss,
    token_advantages,
)

__all__ = ["PPOConfig", "PPOLearner", "PPOStats", "split_evenly"]


@attrs.frozen
class PPOConfig:
    """PPO's options (`--algorithm-config`); each one's `help` says what it does and why its default."""

    clip_low: float = attrs.field(
        default=0.2,
        validator=number_in(0.0, 1.0, low_open=True, high_open=True),
        metadata={
            "help": "r = pi / pi_old is clipped to [1 - clip_low, 1 + clip_high] (PPO's 0.2 on both sides)"
        },
    )
    clip_high: float = attrs.field(
        default=0.2,
        validator=positive,
        metadata={
            "help": 'the upper clip; DAPO\'s "clip higher" raises it (e.g. 0.28) to keep exploring rare tokens'
        },
    )
    dual_clip: float | None = attrs.field(
        default=3.0,
        validator=number_above(1.0, optional=True),
        metadata={
            "help": "for A < 0 a token's loss is capped at dual_clip |A| (verl's clip_ratio_c); null: none"
        },
    )
    behaviour_weight_cap: float = attrs.field(
        default=2.0,
        validator=number_above(1.0, inclusive=True),
        metadata={"help": "w = min(pi_old / mu, cap) corrects for the sampler (oat truncates at 2)"},
    )
    epochs: int = attrs.field(
        default=2, validator=count, metadata={"help": "passes over each batch (SPIRAL: 2)"}
    )
    mini_batches: int = attrs.field(
        default=1, validator=count, metadata={"help": "optimizer steps per pass (SPIRAL: 1)"}
    )
    kl_coef: float = attrs.field(
        default=0.0,
        validator=non_negative_number,
        metadata={
            "help": "weight of the KL to the base model (the backbone with the adapter disabled); SPIRAL uses none"
        },
    )
    kl_estimator: str = attrs.field(
        default="k2",
        validator=choice(*KL_ESTIMATORS),
        metadata={"help": "k2 and k1-reward follow KL(pi || base), k3 KL(base || pi) (see `loss`)"},
    )
    entropy_coef: float = attrs.field(
        default=0.0, validator=non_negative_number, metadata={"help": "weight of the entropy bonus"}
    )
    filter_zero_advantage: bool = attrs.field(
        default=False,
        validator=boolean,
        metadata={
            "help": "drop steps whose advantage is exactly 0 before training (SPIRAL): they carry no policy "
            "gradient but would dilute the batch mean"
        },
    )


@attrs.define
class PPOStats:
    """Token sums of one update, reported as `ppo/...` means by `metrics()`: the trust region's (r = pi /
    pi_old, over every epoch) and the behaviour weight's (pi_old / mu, once, over the recorded tokens)."""

    tokens: int = 0
    clipped_low: int = 0  # A < 0 and r < 1 - clip_low: the clip binds, the token gets no gradient
    clipped_high: int = 0  # A > 0 and r > 1 + clip_high
    dual_clipped: int = 0  # A < 0 and the loss capped at dual_clip |A|
    ratio: float = 0.0
    ratio_max: float = 0.0
    approx_kl: float = 0.0  # k3 of KL(pi_old || pi), as CleanRL's approx_kl
    entropy: float = 0.0
    kl_to_base: float = 0.0
    behaviour_tokens: int = 0
    behaviour_ratio: float = 0.0  # pi_old / mu before truncation
    behaviour_ratio_max: float = 0.0
    behaviour_weight: float = 0.0  # w, truncated
    behaviour_truncated: int = 0

    def add_behaviour(self, fixed: Fixed, tokens: TokenBatch, cap: float) -> None:
        """Add one micro-batch's pi_old / mu (where mu was recorded)."""
        mask = tokens.behaviour_mask
        if not bool(mask.any()):
            return
        raw = (fixed.old_logp - tokens.behaviour_logprobs)[mask].double().exp()  # [N]
        self.behaviour_tokens += int(mask.sum())
        self.behaviour_ratio += float(raw.sum())
        self.behaviour_ratio_max = max(self.behaviour_ratio_max, float(raw.max()))
        self.behaviour_weight += float(fixed.weight[mask].double().sum())
        self.behaviour_truncated += int((raw > cap).sum())

    def add(self, logp: Any, fixed: Fixed, adv: Any, mask: Any, entropy: Any, cfg: PPOConfig) -> None:
        """Add one loss pass over a micro-batch ([B, T-1] tensors; adv per token; mask bool)."""
        if not bool(mask.any()):
            return
        log_r = (logp.detach() - fixed.old_logp).double()
        r = log_r.exp()
        self.tokens += int(mask.sum())
        self.clipped_low += int(((adv < 0) & (r < 1 - cfg.clip_low) & mask).sum())
        self.clipped_high += int(((adv > 0) & (r > 1 + cfg.clip_high) & mask).sum())
        if cfg.dual_clip is not None:
            worst = r.maximum(r.clamp(1 - cfg.clip_low, 1 + cfg.clip_high))  # the surrogate is |A| worst
            self.dual_clipped += int(((adv < 0) & (worst > cfg.dual_clip) & mask).sum())
        self.ratio += float(r[mask].sum())
        self.ratio_max = max(self.ratio_max, float(r[mask].max()))
        self.approx_kl += float(((r - 1) - log_r)[mask].sum())
        self.entropy += float(entropy.detach()[mask].sum())
        if fixed.ref_logp is not None:
            self.kl_to_base += float(k3_kl(logp.detach(), fixed.ref_logp)[mask].sum())

    def metrics(self, with_kl_to_base: bool) -> dict[str, float]:
        n, nb = max(self.tokens, 1), max(self.behaviour_tokens, 1)
        out = {
            "ppo/clip_fraction_low": self.clipped_low / n,
            "ppo/clip_fraction_high": self.clipped_high / n,
            "ppo/clip_fraction": (self.clipped_low + self.clipped_high) / n,
            "ppo/dual_clip_fraction": self.dual_clipped / n,
            "ppo/ratio_mean": self.ratio / n if self.tokens else 1.0,
            "ppo/ratio_max": self.ratio_max if self.tokens else 1.0,
            "ppo/approx_kl": self.approx_kl / n,
            "ppo/entropy": self.entropy / n,
            "ppo/behaviour_ratio_mean": self.behaviour_ratio / nb if self.behaviour_tokens else 1.0,
            "ppo/behaviour_ratio_max": self.behaviour_ratio_max if self.behaviour_tokens else 1.0,
            "ppo/behaviour_weight_mean": self.behaviour_weight / nb if self.behaviour_tokens else 1.0,
            "ppo/behaviour_truncated_fraction": self.behaviour_truncated / nb,
        }
        if with_kl_to_base:
            out["ppo/kl_to_base"] = self.kl_to_base / n
        return out


class PPOLearner(BaseLearner):
    """Decoupled PPO-clip with the step's shaped reward as advantage (baselines come from the reward
    transforms)."""

    buffer_kind = "step"
    default_importance_cap = None  # behaviour_weight_cap does this job in ppo's loss
    own_importance_weight = "behaviour_weight_cap in --algorithm-config"
    algorithm_config_class = PPOConfig
    step_stats = ("_off_policy", "_stats")  # `_update` adds to PPOStats: merged over data-parallel ranks

    def initialize_algorithm(self, **kwargs: Any) -> None:
        """Set the options of `PPOConfig`."""
        self.ppo: PPOConfig = self.accept_algorithm_kwargs(PPOConfig, kwargs)
        self._filtered = 0
        self._stats = PPOStats()
        self._layout = Layout()

    def prepare_batch(self, batch: list[Step]) -> list[Step]:
        """SPIRAL's filter: without the steps whose advantage is exactly 0, when filter_zero_advantage."""
        kept = [s for s in batch if s.reward != 0.0] if self.ppo.filter_zero_advantage else batch
        self._filtered = len(batch) - len(kept)
        return kept

    def _rng(self) -> random.Random:
        return random.Random(self.config.seed * 1_000_003 + self.step)

    def optimize(self, samples: list[Step]) -> dict[str, float]:
        """Fix pi_old (and w, and the base's log-probs) on the update's micro-batches, then `epochs` passes,
        each over the micro-batches reshuffled whole and cut evenly into `mini_batches` optimizer steps
        (fewer only when there are fewer micro-batches than that)."""
        self._stats = PPOStats()
        rng = self._rng()
        micro_batches = self.fix_logprobs(samples, rng)
        per_step: list[dict[str, float]] = []
        for _ in range(self.ppo.epochs if micro_batches else 0):
            order = list(micro_batches)
            if self.ppo.mini_batches > 1:
                rng.shuffle(order)
            per_step += [self.optimizer_step_on(part) for part in split_evenly(order, self.ppo.mini_batches)]
        self._layout = Layout()  # this update's tensors: free them
        metrics: dict[str, float] = {}
        for key in {k for m in per_step for k in m}:
            values = [m[key] for m in per_step if key in m]
            metrics[key] = sum(values) if key == "skipped_nonfinite" else sum(values) / len(values)
        metrics.update(self._stats.metrics(with_kl_to_base=self.ppo.kl_coef > 0))
        metrics["ppo/optimizer_steps"] = float(len(per_step))
        metrics["ppo/zero_advantage_filtered"] = float(self._filtered)
        return metrics

    def fix_logprobs(self, samples: list[Step], rng: random.Random | None = None) -> list[list[Step]]:
        """Before the update's first optimizer step: cut `samples` into the update's micro-batches and give
        each, from gradient-free passes in its own layout without dropout, pi_old, w = min(pi_old / mu, cap)
        and, with a KL term, the base's log-probs (the base never changes: once per update, not per optimizer
        step). Also records how off-policy the data was (`off_policy/...`: pi_old against mu). Returns the
        micro-batches."""
        self._layout = Layout()
        cap = self.ppo.behaviour_weight_cap
        for micro in cut_micro_batches(
            samples, self.config.mini_batch_size, self.ppo.mini_batches, rng or self._rng()
        ):
            tokens = self.collate(micro)
            old = self.reference_logprobs(tokens)  # [B, T-1], no dropout: the policy, not one mask of it
            ref = self.base_logprobs(tokens) if self.ppo.kl_coef > 0 else None
            fixed = Fixed(
                old, behaviour_weights(old, tokens.behaviour_logprobs, tokens.behaviour_mask, cap), ref
            )
            self.record_off_policy(old, tokens)
            self._stats.add_behaviour(fixed, tokens, cap)
            self._layout.add(micro, fixed)
        return self._layout.micro_batches

    def base_logprobs(self, tokens: TokenBatch) -> Any:
        """[B, T-1] tempered log-probs of the base model: the same backbone with the adapter disabled, no
        dropout."""
        with self.model.disable_adapter():
            return self.reference_logprobs(tokens)

    def _update(self, batch: list[Step], scale: float) -> dict[str, float]:
        """Forward one of the update's micro-batches, backward its scaled PPO loss, return its metrics."""
        import torch

        fixed = self._layout.get(batch)
        tokens = self.collate(batch)
        mask = tokens.target_mask
        logp, entropy = self.policy_logprobs(tokens, entropy=True)  # [B, T-1] each, 0 off the completion
        if not self.ppo.entropy_coef:
            entropy = entropy.detach()  # a metric only: frees its graph (a [N, vocab] tensor) at once
        advantages = torch.tensor([s.reward for s in batch], dtype=torch.float32, device=self.device)  # [B]
        cfg = self.ppo
        loss = ppo_loss(
            logp,
            fixed.old_logp,
            advantages,
            mask,
            max_generation_len=self.config.max_generation_len,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
            dual_clip=cfg.dual_clip,
            behaviour_weight=fixed.weight,
            kl_coef=cfg.kl_coef,
            ref_logp=fixed.ref_logp,
            kl_estimator=cfg.kl_estimator,
            entropy_coef=cfg.entropy_coef,
            entropy=entropy,
        )
        (loss * scale).backward()
        adv = token_advantages(advantages, fixed.old_logp, fixed.ref_logp, cfg.kl_coef, cfg.kl_estimator)
        self._stats.add(logp, fixed, adv, mask, entropy, cfg)

        n_tokens = mask.sum().clamp(min=1)
        with torch.no_grad():
            ratio = (logp - fixed.old_logp).exp()
            surrogate = fixed.weight * clipped_surrogate(
                ratio, adv, cfg.clip_low, cfg.clip_high, cfg.dual_clip
            )
        return {
            "loss": loss.item(),
            "policy_loss": ((surrogate * mask).sum() / n_tokens).item(),
            "advantage_mean": advantages.mean().item(),
            "logprob_per_token": (logp.detach().sum() / n_tokens).item(),
            "completion_tokens": mask.sum(dim=-1).float().mean().item(),
        }
