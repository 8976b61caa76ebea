"""REINFORCE over the legal answers: softmax policy gradient on q, the policy renormalised over them.

    loss(s) = -sum_a sg(q_a * (Q_a - V)) * log q_a,   V = sum_a q_a Q_a

With the values of every legal answer (branching the game) this is the exact policy gradient of
E_q[Q] at the state; with only the played answer's (Q = R / q(played) there, 0 elsewhere) it is
REINFORCE on log q(played). It is the yardstick of the saturation: each answer's push is scaled by q_a,
so the answers a saturated policy never gives get almost none (NeuRD and MMD are the remedies). The rules'
and entropy terms and the fallback for games without legal moves are `LegalAnswersLearner`'s.
"""

from __future__ import annotations

from typing import Any

from unstable_core.learners.legal import LegalAnswersLearner, LegalOptions, LegalState, legal_logq


def legal_pg_loss(y: Any, values: Any) -> Any:
    """-sum_a sg(q_a (Q_a - V)) log q_a from y [K] (with gradient) and values [K]."""
    logq = legal_logq(y)
    q = logq.exp().detach()
    return -((q * (values - (q * values).sum())) * logq).sum()


class LegalPGLearner(LegalAnswersLearner):
    """Softmax policy gradient on the legal answers of each visited state."""

    algorithm_config_class = LegalOptions

    def initialize_algorithm(self, **kwargs: Any) -> None:
        """Set the options of `LegalOptions`."""
        self.accept_algorithm_kwargs(LegalOptions, kwargs)

    def legal_loss(self, y: Any, values: Any, state: LegalState) -> tuple[Any, dict[str, float]]:
        """The softmax policy gradient's loss at one state."""
        return legal_pg_loss(y, values), {}
