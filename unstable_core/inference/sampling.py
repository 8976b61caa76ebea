"""Choosing the next token of each row from raw logits: greedy, temperature and nucleus (top-p) sampling."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from unstable_core.inference.messages import SamplingParams


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero every token outside the smallest set whose mass reaches `top_p` (per row); not renormalised.

    probs: [B, V], top_p: [B]. A token is kept when the mass of the tokens ranked above it is < top_p.
    """
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # [B, V]
    mass_above = sorted_probs.cumsum(dim=-1) - sorted_probs  # [B, V]
    keep_sorted = mass_above < top_p[:, None]  # [B, V]; the top token is always kept
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return probs * keep


def sample_tokens(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
) -> torch.Tensor:
    """One next token per row of `logits` [B, V] under that row's params; temperature 0 is argmax. -> [B]"""
    tokens = logits.argmax(dim=-1)  # [B]
    sampled = [i for i, p in enumerate(params) if p.temperature > 0]
    if not sampled:
        return tokens
    rows = torch.tensor(sampled, device=logits.device)
    temperature = torch.tensor([params[i].temperature for i in sampled], device=logits.device)
    top_p = torch.tensor([params[i].top_p for i in sampled], device=logits.device)
    probs = torch.softmax(logits[rows].float() / temperature[:, None], dim=-1)  # [S, V]
    if bool((top_p < 1.0).any()):  # the sort over the vocabulary is the costly part: skip it when unused
        probs = top_p_filter(probs, top_p)
    for j, i in enumerate(sampled):
        tokens[i] = torch.multinomial(probs[j], 1, generator=generators[i])[0]
    return tokens
