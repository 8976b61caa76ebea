"""The probes' answer scorer against one whole forward pass per answer, on the tiny random-weight model:
shared prefixes, left padding, answers of 0 to 3 tokens, the closing `]` tokens; and a model's policy at
real positions (its probabilities are those of the completions that play each legal move)."""

import math
import random

import pytest
import torch

from unstable_core.games.templates import answer_prompt
from unstable_core.inference.hf.logprob_scorer import MIN_SHARED, Scorer, prompt_groups
from unstable_core.probes.model_policy import ModelPolicy, load_model


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return load_model(tiny_model, device="cpu")


def whole_pass(model, prompt, answer, closing):
    """log P(answer, then a closing token | prompt) from one forward pass over prompt + answer."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(prompt) + list(answer)])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    total = sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(answer))
    if closing:
        total += float(torch.logsumexp(logp[len(prompt) - 1 + len(answer), closing], 0))
    return total


def test_prompt_groups_share_the_prefix_of_each_seat():
    frame, rules = list(range(100, 130)), list(range(300, 340))
    prompts = [frame + [200 + i % 2] + rules + [400 + i] * (i + 1) for i in range(6)]
    groups = prompt_groups(prompts, pass_cost=24)
    assert sorted(sorted(g) for g, _ in groups) == [[0, 2, 4], [1, 3, 5]]
    assert {n for _, n in groups} == {len(frame) + 1 + len(rules)}
    alone = prompt_groups([[1, 2, 3]], pass_cost=24)
    assert alone == [([0], 0)]
    short = prompt_groups([list(range(MIN_SHARED - 1)) + [7], list(range(MIN_SHARED - 1)) + [8]], 0)
    assert {n for _, n in short} == {0}  # below MIN_SHARED the prompts run whole


def test_scores_equal_a_whole_forward_pass_per_answer(tiny):
    model, _ = tiny
    rng = random.Random(0)
    frame = [rng.randrange(5, 900) for _ in range(40)]
    prompts = [
        frame + [901 + i % 2] + [rng.randrange(5, 900) for _ in range(rng.randrange(3, 30))] for i in range(9)
    ]
    prompts.append([5, 6, 7])  # shares nothing with the others
    answers = [
        [[rng.randrange(5, 999) for _ in range(rng.randrange(0, 4))] for _ in range(rng.randrange(1, 6))]
        for _ in prompts
    ]
    closing = [11, 12, 13, 900]
    got = Scorer(model).logprobs(prompts, answers, closing)
    for prompt, row_answers, scores in zip(prompts, answers, got, strict=True):
        for answer, score in zip(row_answers, scores, strict=True):
            assert score == pytest.approx(whole_pass(model, prompt, answer, closing), abs=1e-4)
    without = Scorer(model).logprobs(prompts[:2], answers[:2])
    for prompt, row_answers, scores in zip(prompts, answers, without, strict=False):
        for answer, score in zip(row_answers, scores, strict=True):
            assert score == pytest.approx(whole_pass(model, prompt, answer, []), abs=1e-4)


def test_a_policy_sums_the_spellings_of_each_move_over_its_completions(tiny):
    """The policy's probability of a move is the sum over its spellings of P(spelling after the template's
    `[`, then any token that starts with `]`)."""
    from unstable_core.probes import kuhn_exploitability as kuhn

    model, tokenizer = tiny
    policy = ModelPolicy(model, tokenizer, answer_prompt("move", tokenizer))
    position = kuhn.positions("KuhnPoker-v0-short-train")[0]
    (probs,) = policy([position])
    text, ids = policy.prompt.render(position.observation)
    assert text.endswith("[")
    closing = [i for i in range(len(tokenizer)) if tokenizer.decode([i]).startswith("]")]
    assert tokenizer.encode("]", add_special_tokens=False)[0] in closing and len(closing) > 1
    for move, spellings in position.answers.items():
        expected = sum(
            math.exp(whole_pass(model, ids, tokenizer.encode(s[1:-1], add_special_tokens=False), closing))
            for s in spellings
        )
        assert probs[move] == pytest.approx(expected, rel=1e-3)
    assert set(probs) == {"[check]", "[bet]"} and 0 < sum(probs.values()) < 1
