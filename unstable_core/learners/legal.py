"""Every legal answer of a visited state, scored by the policy: what a learner needs to train on the
answers that were not played (NeuRD, MMD) and to regularise with the exact entropy over the legal answers.

Where a game's legal moves can be read, the game loop records them on each step a model played, in
`step.step_info["legal"]`: the moves, the completion token ids that play each one, the index of the one
played (-1: none), and, when the run branches the game (`branch_samples`), the mean outcome for the mover
of playing each move, over K continuations with the current policy and the same opponent ("values").

At such a state, with y_a = log pi_T(a | s) the sequence log-prob of answer a (its tokens' log-probs
summed; the prompt's forward shared by all answers), the policy over the legal answers is
q = softmax(y), and 1 - sum_a exp(y_a) is the mass the model puts on answers the game refuses.

`LegalAnswersLearner` is the base of the learners that train on q: a step with legal answers gets the
algorithm's `legal_loss`, plus -log(legal mass) (the rules: the answers the game accepts) and -tau H(q)
(the exact entropy over the legal answers, not the sampled surprisal); a step without them (a game whose
legal moves cannot be read) gets the sampled policy gradient on its completion, as REINFORCE does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from unstable_core.config.validators import boolean, choice, non_negative_number
from unstable_core.errors import UnstableError
from unstable_core.learners.answer_tree import answer_sums
from unstable_core.learners.base import BaseLearner
from unstable_core.learners.shared_prefix import can_share
from unstable_core.model_loading import plain_linear_head
from unstable_core.types import LEGAL, Step

MIN_PLAYED_Q = 0.05  # the floor of q(played) in an importance-weighted value estimate: bounds 1/q at 20


@attrs.frozen
class LegalState:
    """The legal answers at one visited state: the moves, their completion ids, the index of the move
    played (-1: none) and, when the game was branched, each move's value for the mover."""

    step: Step
    moves: tuple[str, ...]
    ids: tuple[tuple[int, ...], ...]
    played: int = -1
    values: tuple[float, ...] | None = None
    cost: dict[str, float] = attrs.field(factory=dict)  # branching's: continuation turns, seconds

    @classmethod
    def of(cls, step: Step) -> LegalState | None:
        """The step's legal answers, or None where its game could not read them (or only one is legal:
        there is nothing to choose)."""
        legal = step.step_info.get(LEGAL)
        if not legal or len(legal.get("moves", ())) < 2:
            return None
        moves, ids = tuple(legal["moves"]), tuple(tuple(i) for i in legal["ids"])
        values = legal.get("values")
        if len(ids) != len(moves) or (values is not None and len(values) != len(moves)):
            raise UnstableError(
                f"step (game {step.game_idx}, turn {step.turn}) has {len(moves)} legal moves but "
                f"{len(ids)} completions and {len(values or moves)} values; the game loop records one each"
            )
        if not all(ids):
            raise UnstableError(
                f"step (game {step.game_idx}, turn {step.turn}) has an empty legal completion"
            )
        return cls(
            step,
            moves,
            ids,
            int(legal.get("played", -1)),
            None if values is None else tuple(map(float, values)),
            dict(legal.get("cost", {})),
        )


def answer_rows(state: LegalState) -> list[Step]:
    """One step per legal answer: the state's exact prompt ids, then the answer's completion ids."""
    return [attrs.evolve(state.step, completion_ids=list(ids), logprobs=[]) for ids in state.ids]


def answer_logprobs(learner: BaseLearner, state: LegalState) -> Any:
    """y [K]: log pi_T(a | s) of each legal answer under `learner`'s policy, its tokens' log-probs summed;
    the prompt runs once, its answers on its cached keys and values (`answer_logprobs_of`)."""
    return answer_logprobs_of(learner, [state])[0]


def answer_logprobs_of(learner: BaseLearner, states: Sequence[LegalState]) -> list[Any]:
    """`answer_logprobs` of each state: two passes over all of them (`answer_tree`: each prompt once, the
    frame they share once, then every answer on its prompt's cache) where the decoder allows it (float32,
    plain caches, a Linear head); otherwise a forward per state, in which its answers share its prompt
    (`shared_prefix`): states batched as flat rows would run each prompt once per answer."""
    base = learner.model.get_base_model()
    decoder = base.get_decoder()
    if not (plain_linear_head(base) and can_share(decoder)):
        return [learner.policy_logprobs(learner.collate(answer_rows(st))).sum(dim=-1) for st in states]
    return answer_sums(
        decoder,
        base.get_output_embeddings(),
        [st.step.prompt_ids for st in states],
        [st.ids for st in states],
        pad_token_id=learner.pad_token_id,
        temperature=learner.config.temperature,
        top_p=learner.config.top_p,
    )


def legal_logq(y: Any) -> Any:
    """log q over the legal answers from their sequence log-probs y [K] (a softmax over them)."""
    return y - y.logsumexp(dim=-1)


def legal_entropy(y: Any) -> Any:
    """H(q) = -sum_a q_a log q_a, exact over the legal answers (a scalar, with gradient)."""
    logq = legal_logq(y)
    return -(logq.exp() * logq).sum()


def legal_mass_loss(y: Any) -> Any:
    """-log sum_a pi(a | s): the mass on answers the game refuses, pushed down (0 when it is none)."""
    return -y.logsumexp(dim=-1)


def played_values(state: LegalState, reward: float, q: Any) -> Any:
    """[K] values of the legal answers where the game was not branched: the importance-weighted estimate
    Q_a = 1[a played] * R / q_a, unbiased for sum_a q_a Q_a's gradient and 0 for the moves not played; q
    is floored at MIN_PLAYED_Q so that one rare answer cannot dominate the update."""
    import torch

    values = torch.zeros_like(q)
    if state.played >= 0:
        values[state.played] = reward / q[state.played].clamp(min=MIN_PLAYED_Q)
    return values


def sampled_pg_loss(token_logprobs: Any, advantages: Any, max_generation_len: int) -> Any:
    """-A_i * sum_t w_t log pi(y_t) / max_generation_len, the batch mean: REINFORCE on the sampled tokens."""
    return (-advantages * token_logprobs.sum(dim=-1) / max_generation_len).mean()


class LegalAnswersLearner(BaseLearner):
    """A learner of q, the policy over the legal answers (see the module docstring): subclasses write
    `legal_loss(y, values, state)` for one state; the rules' and entropy terms and the fallback are here."""

    algorithm_config_class: ClassVar[type | None] = None  # a subclass of LegalOptions

    def legal_loss(self, y: Any, values: Any, state: LegalState) -> tuple[Any, dict[str, float]]:
        """The algorithm's loss at one state from y [K] (with gradient) and values [K] (without): a scalar and
        its metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement legal_loss(y, values, state)")

    def answer_logprobs(self, state: LegalState) -> Any:
        """y [K]: log pi_T(a | s) of each legal answer, with gradient (see `answer_logprobs`)."""
        return answer_logprobs(self, state)

    def trains_on(self, step: Step) -> bool:
        """Whether `step` enters the loss: not an unbranched state under `unbranched = "skip"`, nor a
        branched one whose values are all equal under `skip_flat` (its target is q itself: only the rules
        would train there). A step without legal answers always does (the sampled gradient)."""
        legal = step.step_info.get(LEGAL)
        if not legal or len(legal.get("moves", ())) < 2:
            return True
        values = legal.get("values")
        if values is None:
            return self.algorithm_cfg["unbranched"] != "skip"
        return not (self.algorithm_cfg["skip_flat"] and max(values) == min(values))

    def prepare_batch(self, batch: list[Step]) -> list[Step]:
        """The batch without the steps the options leave out (`trains_on`): they cost no forward."""
        kept = [step for step in batch if self.trains_on(step)]
        self._left_out = len(batch) - len(kept)
        return kept

    def optimizer_step(self, samples: list[Any]) -> dict[str, float]:
        """The base's step on the steps kept; none when every step was left out (Adam's moments would still
        move the weights on a zero gradient)."""
        counts = {
            "legal/left_out": float(getattr(self, "_left_out", 0)),
            "legal/trained": float(len(samples)),
        }
        return {**(super().optimizer_step(samples) if samples else {}), **counts}

    def _update(self, batch: list[Step], scale: float) -> dict[str, float]:
        """Backward the legal-answer loss of each step with legal answers and the sampled policy gradient
        of the others, each step weighted 1/len(batch) within this micro-batch."""
        import torch

        states = [LegalState.of(s) for s in batch]
        plain = [s for s, st in zip(batch, states, strict=True) if st is None]
        metrics: dict[str, float] = {"legal/steps": float(len(batch) - len(plain)) / len(batch)}
        if plain:
            tokens = self.collate(plain)
            logp = self.policy_logprobs(tokens)  # [B, T-1], 0 off the completion
            weights = self.importance_weights(logp, tokens)  # [B, T-1]
            advantages = torch.tensor([s.reward for s in plain], device=self.device)  # [B]
            loss = sampled_pg_loss(weights * logp, advantages, self.config.max_generation_len)
            (loss * scale * len(plain) / len(batch)).backward()
            metrics["loss/sampled"] = loss.item()
        scored = [st for st in states if st is not None]
        if scored:
            self.before_states(scored)
            total, sums = None, {}
            for state, y in zip(scored, answer_logprobs_of(self, scored), strict=True):
                loss, found = self._state_loss(state, y)
                total = loss if total is None else total + loss
                for key, value in found.items():
                    sums[key] = sums.get(key, 0.0) + value
            (total * scale / len(batch)).backward()
            metrics.update({key: value / len(batch) for key, value in sums.items()})
        return metrics

    def before_states(self, states: list[LegalState]) -> None:
        """Work on a micro-batch's states before their losses (MMD's base magnet, in one forward)."""

    def _state_loss(self, state: LegalState, y: Any) -> tuple[Any, dict[str, float]]:
        """One state's loss (the algorithm's, the rules' and the entropy's) from y [K], and its metrics."""
        import torch

        q = legal_logq(y).exp().detach()  # [K]
        cfg = self.algorithm_cfg
        if state.values is not None:
            values = torch.tensor(state.values, dtype=y.dtype, device=y.device)
        elif cfg["unbranched"] == "rules":
            values = torch.zeros_like(q)  # no value: the rules, the entropy and the algorithm's own pull
        else:
            values = played_values(state, state.step.reward, q)
        loss, metrics = self.legal_loss(y, values, state)
        entropy = legal_entropy(y)
        mass = legal_mass_loss(y)
        total = loss + cfg["legal_mass_coef"] * mass - cfg["entropy_coef"] * entropy
        metrics.update(
            {
                "loss": total.item(),
                "legal/entropy": entropy.item(),
                "legal/illegal_mass": 1.0 - float(y.detach().exp().sum()),
                "legal/q_played": float(q[state.played]) if state.played >= 0 else 0.0,
                "legal/branched": float(state.values is not None),
                "branch/turns": float(state.cost.get("turns", 0.0)),
                "branch/seconds": float(state.cost.get("seconds", 0.0)),
            }
        )
        return total, metrics


@attrs.frozen
class LegalOptions:
    """The options every LegalAnswersLearner takes (its `algorithm_config_class` subclasses this)."""

    legal_mass_coef: float = attrs.field(
        default=1.0,
        validator=non_negative_number,
        metadata={"help": "weight of -log(legal mass), which teaches the answers the game accepts (0: off)"},
    )
    entropy_coef: float = attrs.field(
        default=0.0,
        validator=non_negative_number,
        metadata={"help": "tau of -tau H(q), the exact entropy over the legal answers (0: off)"},
    )
    unbranched: str = attrs.field(
        default="played",
        validator=choice("played", "rules", "skip"),
        metadata={
            "help": "values where the game was not branched: 'played' (the played answer's return over its q), "
            "'rules' (none: such a state teaches the rules and the entropy only) or 'skip' (left out of the "
            "update, at no cost)"
        },
    )
    skip_flat: bool = attrs.field(
        default=False,
        validator=boolean,
        metadata={
            "help": "leave out the branched states whose values are all equal (no answer is better there): "
            "the learner's time goes to the states that tell the answers apart"
        },
    )
