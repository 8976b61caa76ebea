"""NeuRD (Hennes et al. 2020, "Neural Replicator Dynamics"), thresholded, on the legal answers' logits.

At a state s with legal answers a and their values Q(s, a) (from branching the game, else the played
answer's importance-weighted return), the logits are y_a = log pi_T(a | s) centred over the answers,
q = softmax(y) and V = sum_a q_a Q(s, a):

    loss(s) = -sum_a sg(A_a * gate_a) * (y_a - mean_b y_b),   A_a = Q(s, a) - V
    gate_a  = 1 unless the step would push y_a past the threshold: A_a > 0 and y_a - mean y >= beta,
              or A_a < 0 and y_a - mean y <= -beta

The gradient moves each logit by its advantage, not by q_a * A_a as softmax policy gradient does: an
answer the policy almost never gives still moves at full speed, so a saturated policy is not stuck
(the threshold keeps the logits bounded, as in the paper's experiments). The rules' and entropy terms and
the fallback for games without legal moves are `LegalAnswersLearner`'s.
"""

from __future__ import annotations

from typing import Any

import attrs

from unstable_core.config.validators import positive
from unstable_core.learners.legal import LegalAnswersLearner, LegalOptions, LegalState, legal_logq


@attrs.frozen
class NeuRDConfig(LegalOptions):
    """NeuRD's options (`--algorithm-config`), beside the rules' and entropy's weights."""

    threshold: float = attrs.field(
        default=1.0,
        validator=positive,
        metadata={
            "help": "beta: a centred logit is not pushed past +-beta (Hennes et al.'s threshold); at 2 the "
            "saturation test's minority sets stay stuck"
        },
    )


def neurd_loss(y: Any, values: Any, threshold: float) -> tuple[Any, Any]:
    """(the thresholded NeuRD loss, the gate) from y [K] (with gradient) and values [K]."""
    q = legal_logq(y).exp().detach()  # [K]
    advantage = values - (q * values).sum()  # [K]: A = Q - V
    centred = y - y.mean()  # [K]
    gate = ((advantage > 0) & (centred.detach() < threshold)) | (
        (advantage < 0) & (centred.detach() > -threshold)
    )
    return -((advantage * gate).detach() * centred).sum(), gate


class NeuRDLearner(LegalAnswersLearner):
    """Thresholded NeuRD on every legal answer of each visited state."""

    algorithm_config_class = NeuRDConfig

    def initialize_algorithm(self, **kwargs: Any) -> None:
        """Set the options of `NeuRDConfig`."""
        self.neurd: NeuRDConfig = self.accept_algorithm_kwargs(NeuRDConfig, kwargs)

    def legal_loss(self, y: Any, values: Any, state: LegalState) -> tuple[Any, dict[str, float]]:
        """The thresholded NeuRD loss at one state."""
        loss, gate = neurd_loss(y, values, self.neurd.threshold)
        return loss, {"neurd/gated_fraction": 1.0 - gate.float().mean().item()}
