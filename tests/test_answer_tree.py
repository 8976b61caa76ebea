"""The legal answers of many states in two passes (`learners/answer_tree.py`): each prompt token runs once,
and the log-probs and gradients are those of every answer run as a whole row."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from unstable_core.learners import BaseLearner  # noqa: E402
from unstable_core.learners.batch import head_logprobs  # noqa: E402
from unstable_core.learners.legal import LEGAL, LegalState, answer_logprobs_of, answer_rows  # noqa: E402
from unstable_core.learners.shared_prefix import MIN_SHARED  # noqa: E402
from unstable_core.types import Step  # noqa: E402

torch.set_num_threads(1)


def state(prompt: list[int], answers: list[list[int]]) -> LegalState:
    moves = [f"[{i}]" for i in range(len(answers))]
    step = Step(
        pid=0, env_id="test", obs="", act="", prompt_ids=prompt, completion_ids=answers[0], reward=1.0,
        step_info={LEGAL: {"moves": moves, "ids": answers, "played": 0}},
    )  # fmt: skip
    return LegalState.of(step)


class Scorer(BaseLearner):
    """A learner that only scores answers: these tests call `answer_logprobs_of`, never `update`."""

    def _update(self, batch, scale):
        raise AssertionError("not updated here")


@pytest.fixture
def learner(tiny_model, tmp_path):
    lrn = Scorer.create(
        tiny_model, device="cpu", run_dir=tmp_path, lora_config={"lora_rank": 4}, temperature=0.7, seed=3
    )
    lrn.initialize_algorithm()
    return lrn


def sums_and_grads(learner, compute, weights):
    """Each state's answer log-prob sums, and the gradient of a weighted sum of them over the adapter."""
    learner.model.zero_grad()
    ys = compute()
    sum((w * y).sum() for w, y in zip(weights, ys, strict=True)).backward()
    return torch.cat(ys).detach(), [p.grad.clone() for p in learner.adapter_parameters("default")]


def whole_rows(learner, states):
    """The reference: every answer a row of its own with its whole prompt, no cache, no sharing."""
    base = learner.model.get_base_model()
    out = []
    for st in states:
        tokens = learner.collate(answer_rows(st))
        hidden = base.get_decoder()(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask)
        logp = head_logprobs(hidden.last_hidden_state, base.get_output_embeddings(), tokens, 0.7)
        out.append(logp.sum(dim=-1))
    return out


@pytest.mark.parametrize("frame", [MIN_SHARED + 8, 0], ids=["shared-frame", "no-frame"])
def test_answers_of_many_states_equal_whole_rows_with_each_prompt_run_once(learner, frame):
    opening = [3 + i % 40 for i in range(frame)]
    states = [
        state(opening + [50, 51, 52], [[60], [61, 62]]),  # answers of different lengths
        state(opening + [53], [[60, 63, 64], [61], [65, 66]]),  # a shorter prompt, three answers
        state(opening + [54, 55, 56, 57, 58], [[67, 68], [69, 70]]),
    ]
    if not frame:  # prompts that differ from their first token
        states = [
            state([70 + i, *st.step.prompt_ids], list(map(list, st.ids))) for i, st in enumerate(states)
        ]
    weights = [torch.randn(len(st.ids)) for st in states]
    decoder = learner.model.get_base_model().get_decoder()
    shapes = []
    hook = decoder.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        tree, tree_grads = sums_and_grads(learner, lambda: answer_logprobs_of(learner, states), weights)
    finally:
        hook.remove()
    longest = max(len(st.step.prompt_ids) for st in states)
    prompts = [(1, frame), (3, longest - frame)] if frame else [(3, longest)]
    assert shapes == [*prompts, (7, 3)]  # 7 answers of at most 3 tokens on their prompts' caches
    whole, whole_grads = sums_and_grads(learner, lambda: whole_rows(learner, states), weights)
    assert torch.allclose(tree, whole, atol=1e-5)
    for a, b in zip(tree_grads, whole_grads, strict=True):  # float rounding: ~4e-6 of the norm
        assert (a - b).norm() <= 1e-4 * b.norm() + 1e-9


def test_a_decoder_without_plain_caches_scores_each_state_alone(learner):
    """With gradient checkpointing (no caches) the answers are scored a state at a time, as whole rows."""
    states = [state([3, 4, 5, 6], [[60], [61, 62]]), state([3, 4, 7], [[63], [64]])]
    weights = [torch.ones(2), torch.ones(2)]
    whole, _ = sums_and_grads(learner, lambda: whole_rows(learner, states), weights)
    learner.model.get_base_model().gradient_checkpointing_enable()
    fallback, _ = sums_and_grads(learner, lambda: answer_logprobs_of(learner, states), weights)
    assert torch.allclose(fallback, whole, atol=1e-5)
