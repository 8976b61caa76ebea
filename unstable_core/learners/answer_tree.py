"""The legal answers of many visited states scored in two decoder passes, each prompt run once.

A micro-batch's states each hold a prompt and K short answers (Kuhn: 2 answers of ~3 tokens after a
~200-token prompt). Pass one runs the S prompts as one right-padded batch, the leading tokens they all
share (the game's chat frame and rules) once at batch 1; pass two runs every answer on a copy of its
state's cached keys and values. Each prompt token is computed once, not once per answer (a flat batch of
the answers) and not in S small forwards (one state at a time): the same function of the parameters,
equal up to float rounding. Like `shared_prefix`, it needs a float32 decoder with plain caches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from unstable_core.learners.batch import TokenBatch, head_logprobs
from unstable_core.learners.shared_prefix import cached_pass, shared_length
from unstable_core.model_loading import cache_kwargs


def padded(rows: Sequence[Sequence[int]], pad: int, device: Any) -> tuple[Any, Any]:
    """[N, W] right-padded ids of `rows` and their [N, W] attention mask (1 on real tokens)."""
    import torch

    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(list(row), dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


def answer_sums(
    decoder: Any,
    head: Any,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[Sequence[Sequence[int]]],
    *,
    pad_token_id: int,
    temperature: float,
    top_p: float,
) -> list[Any]:
    """y_s [K_s] per state: log pi_T(a | prompt_s) of each answer a of state s, its tokens' tempered
    log-probs (the learner's `head_logprobs`) summed, with gradient."""
    import torch

    device = decoder.device
    prompt_ids, prompt_mask = padded(prompts, pad_token_id, device)  # [S, L]
    lengths = prompt_mask.sum(dim=1)  # [S]
    n = shared_length(prompt_ids, lengths - 1)  # the frame every prompt shares, run once
    hidden, cache = cached_pass(decoder, prompt_ids, prompt_mask, n)  # [S, L, H]
    state = torch.tensor([s for s, k in enumerate(answers) for _ in k], device=device)  # [R]
    answer_ids, answer_mask = padded([a for k in answers for a in k], pad_token_id, device)  # [R, A]
    cache.batch_select_indices(state)  # [S, ...] -> [R, ...]: each answer row on its state's prompt
    width = answer_ids.shape[1]
    answered = decoder(
        input_ids=answer_ids,
        attention_mask=torch.cat([prompt_mask[state], answer_mask], dim=1),  # [R, L + A]
        position_ids=lengths[state, None] + torch.arange(width, device=device),  # [R, A]
        **cache_kwargs(decoder, cache),
        use_cache=True,
    ).last_hidden_state  # [R, A, H]
    last = hidden[state, lengths[state] - 1]  # [R, H]: predicts each answer's first token
    # a micro-batch laid out for head_logprobs: position 0 the last prompt token, then the answer's
    rows = TokenBatch(
        input_ids=torch.cat([prompt_ids[state, lengths[state] - 1, None], answer_ids], dim=1),
        attention_mask=None,
        completion_mask=torch.cat([torch.zeros_like(answer_mask[:, :1]), answer_mask], dim=1).bool(),
        last_prompt_index=None,
        behaviour_logprobs=None,
        behaviour_mask=None,
    )
    states = torch.cat([last[:, None], answered], dim=1)  # [R, 1 + A, H]
    sums = head_logprobs(states, head, rows, temperature, False, top_p).sum(dim=-1)  # [R]
    return list(sums.split([len(k) for k in answers]))
