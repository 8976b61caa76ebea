"""Magnetic mirror descent (Sokota et al., ICLR 2023) over the legal answers, fitted by cross-entropy.

At a state s with legal answers a, their values Q(s, a) (from branching the game, else the played answer's
importance-weighted return), the current policy over them q_t (detached) and a magnet rho (uniform over
the legal answers, or the base model's q), MMD's step with step size eta and magnet strength alpha is

    target(a) ∝ [q_t(a) * rho(a)^(alpha eta) * exp(eta Q(s, a))]^(1 / (1 + alpha eta))

the closed form of argmax_pi  eta <pi, Q> - alpha eta KL(pi, rho) - KL(pi, q_t), and the policy is fitted to
it by cross-entropy:

    loss(s) = -sum_a target(a) log q(a)

over `fit_steps` optimizer steps on the same batch, the target fixed at the first (as PPO's epochs fix
pi_old): one gradient step moves q only part of the way, and the batch's values cost far more than a step.

The magnet pulls the logits toward rho by a factor 1 / (1 + alpha eta) every step, so the policy converges
to a regularised equilibrium (a QRE) instead of saturating on one answer. The rules' and entropy terms and
the fallback for games without legal moves are `LegalAnswersLearner`'s.
"""

from __future__ import annotations

from typing import Any

import attrs

from unstable_core.config.validators import choice, count, non_negative_number, positive
from unstable_core.learners.legal import (
    LegalAnswersLearner,
    LegalOptions,
    LegalState,
    answer_logprobs_of,
    legal_logq,
)


@attrs.frozen
class MMDConfig(LegalOptions):
    """MMD's options (`--algorithm-config`), beside the rules' and entropy's weights."""

    eta: float = attrs.field(
        default=1.0, validator=positive, metadata={"help": "the mirror step's size (> 0)"}
    )
    alpha: float = attrs.field(
        default=0.05,
        validator=non_negative_number,
        metadata={"help": "the magnet's strength (0: mirror descent with no magnet)"},
    )
    magnet: str = attrs.field(
        default="uniform",
        validator=choice("uniform", "base"),
        metadata={"help": "rho: uniform over the legal answers, or the base model's policy over them"},
    )
    fit_steps: int = attrs.field(
        default=1,
        validator=count,
        metadata={"help": "optimizer steps fitting one batch's target (fixed at the first step)"},
    )


def mmd_target(logq: Any, values: Any, eta: float, alpha: float, log_magnet: Any) -> Any:
    """target [K] from log q_t [K], values [K] and log rho [K] (all without gradient)."""
    logits = (logq + alpha * eta * log_magnet + eta * values) / (1.0 + alpha * eta)
    return logits.softmax(dim=-1)


def mmd_loss(y: Any, target: Any) -> Any:
    """Cross-entropy -sum_a target(a) log q(a), q = softmax(y) over the legal answers."""
    return -(target * legal_logq(y)).sum()


class MMDLearner(LegalAnswersLearner):
    """MMD's improvement target over every legal answer of each visited state, fitted by cross-entropy."""

    algorithm_config_class = MMDConfig

    def initialize_algorithm(self, **kwargs: Any) -> None:
        """Set the options of `MMDConfig`."""
        self.mmd: MMDConfig = self.accept_algorithm_kwargs(MMDConfig, kwargs)
        self._targets: dict[int, Any] = {}  # id(step) -> the state's target, within one update

    def optimize(self, samples: list[Any]) -> dict[str, float]:
        """`fit_steps` optimizer steps on the batch, each state's target computed at the first and kept."""
        self._targets = {}
        for _ in range(self.mmd.fit_steps):
            metrics = self.optimizer_step(samples)
        self._targets = {}
        return metrics

    def before_states(self, states: list[LegalState]) -> None:
        """With the base model as magnet: its log q at every state not yet given a target, in one forward
        (adapter off, no gradient)."""
        import torch

        self._base_logq: dict[int, Any] = {}
        todo = [state for state in states if id(state.step) not in self._targets]
        if self.mmd.magnet == "base" and todo:
            with torch.no_grad(), self.model.disable_adapter():
                found = answer_logprobs_of(self, todo)
            self._base_logq = {id(state): legal_logq(y) for state, y in zip(todo, found, strict=True)}

    def log_magnet(self, y: Any, state: LegalState) -> Any:
        """log rho [K]: uniform, or the base model's log q (`before_states`)."""
        import torch

        return torch.zeros_like(y) if self.mmd.magnet == "uniform" else self._base_logq[id(state)]

    def target(self, y: Any, values: Any, state: LegalState) -> Any:
        """The state's target [K]: from q_t at the update's first step, the same at the later ones."""
        key = id(state.step)
        if key not in self._targets:
            cfg = self.mmd
            logq = legal_logq(y.detach())
            self._targets[key] = mmd_target(logq, values, cfg.eta, cfg.alpha, self.log_magnet(y, state))
        return self._targets[key]

    def legal_loss(self, y: Any, values: Any, state: LegalState) -> tuple[Any, dict[str, float]]:
        """Cross-entropy to MMD's target at one state."""
        logq = legal_logq(y.detach())
        target = self.target(y, values, state)
        kl = (target * (target.clamp(min=1e-30).log() - logq)).sum()
        return mmd_loss(y, target), {"mmd/kl_target_policy": kl.item()}
