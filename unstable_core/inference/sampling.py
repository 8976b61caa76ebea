"""The distribution a token is sampled from, and sampling it: greedy, temperature and nucleus (top-p).

One definition for every backend and the learner: a sampled token's log-probability is that of the
distribution actually sampled from, softmax(logits / T) restricted to the top-p nucleus and renormalised
over it (`sampling_logprobs`); with top_p = 1 that is log softmax(logits / T). Greedy (T = 0) is
recorded at T = 1 over the whole vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from unstable_core.inference.messages import SamplingParams


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero every token outside the smallest set whose mass reaches `top_p` (per row); not renormalised.

    probs: [B, V], top_p: [B]. A token is kept when the mass of the tokens ranked above it is < top_p.
    """
    return probs * nucleus_mask(probs, top_p)


def nucleus_mask(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """[B, V] True for the tokens of each row's top-p nucleus: those whose higher-ranked mass is < top_p of
    the row's total. Against the total, not 1: a float32 softmax over 49k tokens sums to 1 + 1e-5, which
    cut a token whose mass above was 2e-6 under 0.9 that vLLM (and exact arithmetic) keeps."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # [B, V]
    cumulative = sorted_probs.cumsum(dim=-1)  # [B, V]
    mass_above = cumulative - sorted_probs  # [B, V]
    keep_sorted = mass_above < top_p[:, None] * cumulative[:, -1:]  # [B, V]; the top token is always kept
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def sampling_logprobs(
    logits: torch.Tensor,
    temperature: torch.Tensor | float,
    top_p: torch.Tensor | float = 1.0,
    targets: torch.Tensor | None = None,
) -> torch.Tensor:
    """[N, V] float32 log-probs of the distribution sampled from: log softmax(logits / T), and for rows
    with top_p < 1 renormalised over the nucleus (-inf outside it). T = 0 counts as 1 with no nucleus.

    `targets` [N] (the learner's sampled tokens) are kept in their row's nucleus, so that a token sampled
    at its edge never gets -inf from rounding. The nucleus is chosen without gradient; the log-probs are
    differentiable in the logits.
    """
    n = logits.shape[0]
    t = torch.as_tensor(temperature, dtype=torch.float32, device=logits.device).expand(n)
    p = torch.as_tensor(top_p, dtype=torch.float32, device=logits.device).expand(n)
    greedy = t <= 0
    t = torch.where(greedy, torch.ones_like(t), t)
    logprobs = (logits.float() / t[:, None]).log_softmax(dim=-1)  # [N, V]
    p = torch.where(greedy, torch.ones_like(p), p)
    cut = p < 1.0
    if not bool(cut.any()):  # the sort over the vocabulary is the costly part: skip it when unused
        return logprobs
    with torch.no_grad():
        keep = nucleus_mask(logprobs.detach().exp(), p) | ~cut[:, None]  # [N, V]
        if targets is not None:
            keep[torch.arange(n, device=keep.device), targets] = True
    return logprobs.masked_fill(~keep, float("-inf")).log_softmax(dim=-1)


def sample_tokens(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
    logprobs: torch.Tensor | None = None,
) -> torch.Tensor:
    """One next token per row of `logits` [B, V] under that row's params; temperature 0 is argmax. -> [B]

    `logprobs` [B, V]: the rows' `sampling_logprobs` when the caller has them already (else computed).
    """
    tokens = logits.argmax(dim=-1)  # [B]
    sampled = [i for i, p in enumerate(params) if p.temperature > 0]
    if not sampled:
        return tokens
    if logprobs is None:
        logprobs = row_logprobs(logits, params)
    rows = torch.tensor(sampled, device=logits.device)
    cumulative = logprobs[rows].exp().cumsum(dim=-1)  # [S, V]
    if not bool(torch.isfinite(cumulative[:, -1]).all()):  # a NaN would silently draw the last token
        raise ValueError("the sampling distribution holds NaN or inf: the model's logits are not finite")
    # inverse-CDF draws, one uniform per row from the row's generator: multinomial's exponential draw over
    # the whole vocabulary costs about a millisecond per row on a CPU
    uniform = torch.cat([torch.rand(1, generator=generators[i], device=logits.device) for i in sampled])
    drawn = torch.searchsorted(cumulative, (uniform * cumulative[:, -1])[:, None], right=True)[:, 0]
    tokens[rows] = drawn.clamp(max=logits.shape[-1] - 1)
    return tokens


def row_logprobs(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """`sampling_logprobs` of `logits` [B, V] with each row's own temperature and top-p. -> [B, V]"""
    device = logits.device
    temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
    top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
    return sampling_logprobs(logits, temperature, top_p)
