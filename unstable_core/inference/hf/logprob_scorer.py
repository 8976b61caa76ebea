"""A model's probability of given completions after given prompts, in a few batched forward passes.

A probe asks for the probability of each legal answer at dozens of positions: the prompts are long (a
game's rules, its history, the board) and the answers a few tokens. So each prompt runs once, with all its
answers: (1) the prompts that open alike (the chat frame and the rules of one seat) are grouped and their
common prefix runs once per group; (2) a row holds one prompt's own tokens, left-padded after that prefix
(as the transformers backend prefills), then the tokens of each of its answers one after the other; an
attention mask lets each answer's tokens see the prefix, the prompt and that answer's earlier tokens only,
at the positions that follow the prompt, as if each answer ran alone after it. The last prompt token's
distribution gives every answer's first token, each answer token's the next one. Log-probs come from the
LM head in float32 at temperature 1 (as the learner computes them), so the result is that of one forward
pass of prompt + answer per answer (tests/test_logprob_scorer.py checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from unstable_core.inference.hf.kv_cache import full_attention_only, in_place_cache
from unstable_core.inference.hf.prefill import PASS_COST_POSITIONS, prefill_groups
from unstable_core.model_loading import cache_kwargs, plain_linear_head

MIN_SHARED = 16  # common prompt tokens below which a group's prefix is not run on its own
MAX_ROWS = 32  # rows in one pass (each holds a copy of its group's prefix keys and values)


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def prompt_groups(prompts: Sequence[Sequence[int]], pass_cost: int = 0) -> list[tuple[list[int], int]]:
    """(prompt indices, shared prefix length) per group: the prompts sorted by their tokens and cut into
    runs so that the positions computed (each group's common prefix once, plus `pass_cost` for its pass,
    then every prompt's own rest) are fewest: the prompts of one seat share the chat frame and the rules,
    those of the two seats only up to "You are Player ". A shared length leaves each prompt at least its
    last token, and is 0 below MIN_SHARED (the group's prompts then run whole)."""
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    lengths = [len(prompts[i]) for i in order]
    neighbours = [common_length(prompts[a], prompts[b]) for a, b in zip(order, order[1:], strict=False)]

    def shared_of(i: int, j: int, lcp: int) -> int:  # sorted rows i..j-1, their common prefix lcp
        n = min(lcp, min(lengths[i:j]) - 1)
        return n if n >= MIN_SHARED and j - i > 1 else 0

    best, cut, keep = [0.0] + [float("inf")] * len(order), [0] * (len(order) + 1), [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        lcp = lengths[j - 1]
        rest = 0
        for i in range(j - 1, -1, -1):  # rows i..j-1 in one group
            if i < j - 1:
                lcp = min(lcp, neighbours[i])
            rest += lengths[i]
            n = shared_of(i, j, lcp)
            cost = best[i] + (pass_cost + n if n else 0) + rest - n * (j - i)
            if cost < best[j]:
                best[j], cut[j], keep[j] = cost, i, n
    groups, j = [], len(order)
    while j > 0:
        groups.append((order[cut[j] : j], keep[j]))
        j = cut[j]
    return groups[::-1]


class Scorer:
    """Log-probabilities of completions under one causal LM (a transformers model, or peft's wrapper of
    one with its adapter active), without gradient."""

    def __init__(self, model: Any, pad_id: int = 0) -> None:
        self.model = model
        self.base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.decoder = self.base.get_decoder()
        self.head = self.base.get_output_embeddings() if plain_linear_head(self.base) else None
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.pad_id = pad_id
        self.pass_cost = PASS_COST_POSITIONS["cuda" if self.device.type == "cuda" else "cpu"]
        # a prefix's keys and values are shared only where every layer caches plain full attention
        self.share = full_attention_only(self.decoder.config)

    @torch.inference_mode()
    def logprobs(
        self,
        prompts: Sequence[Sequence[int]],
        answers: Sequence[Sequence[Sequence[int]]],
        closing: Sequence[int] = (),
    ) -> list[list[float]]:
        """log P(answer tokens | prompt) for each answer of each prompt (`answers[i]`: prompt i's); with
        `closing` token ids, times the probability that the next token is one of them (an answer `check`
        closed by any token that starts with `]`)."""
        out: list[list[float]] = [[0.0] * len(a) for a in answers]
        closing_ids = torch.tensor(sorted(set(closing)), dtype=torch.long, device=self.device)
        groups = prompt_groups(prompts, self.pass_cost) if self.share else [(list(range(len(prompts))), 0)]
        for group, shared in groups:
            prefix = self._prefix(prompts[group[0]][:shared]) if shared else None
            widths = [len(prompts[i]) - shared + sum(map(len, answers[i])) for i in group]
            for part in prefill_groups(widths, self.pass_cost):
                for k in range(0, len(part), MAX_ROWS):
                    rows = [group[j] for j in part[k : k + MAX_ROWS]]
                    scores = self._rows(
                        [prompts[i] for i in rows], [answers[i] for i in rows], shared, prefix, closing_ids
                    )
                    for i, row_scores in zip(rows, scores, strict=True):
                        out[i] = row_scores
        return out

    def _prefix(self, tokens: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Keys and values [1, H, n, D] per layer of a prefix that several prompts share."""
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(config=self.decoder.config)
        ids = torch.tensor([list(tokens)], device=self.device)
        self.decoder(input_ids=ids, **cache_kwargs(self.decoder, cache), use_cache=True)
        return [(layer.keys, layer.values) for layer in cache.layers]

    def _rows(
        self,
        prompts: list[Sequence[int]],
        answers: list[Sequence[Sequence[int]]],
        shared: int,
        prefix: list[tuple[torch.Tensor, torch.Tensor]] | None,
        closing: torch.Tensor,
    ) -> list[list[float]]:
        """The answers' log-probabilities of a few prompts that share their first `shared` tokens (whose
        keys and values are `prefix`), in one pass."""
        rests = [list(p[shared:]) for p in prompts]
        longest = max(map(len, rests))
        width = longest + max(sum(map(len, a)) for a in answers)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        positions = torch.zeros((len(prompts), width), dtype=torch.long)
        seen = torch.zeros((len(prompts), width, shared + width), dtype=torch.bool)
        seen[:, :, :shared] = True
        seen[:, torch.arange(width), shared + torch.arange(width)] = True  # padding sees itself: no empty row
        spans: list[list[tuple[int, int]]] = []  # per row, (first column, length) of each answer
        for b, (rest, row_answers) in enumerate(zip(rests, answers, strict=True)):
            start = longest - len(rest)
            ids[b, start:longest] = torch.tensor(rest)
            positions[b, start:longest] = torch.arange(shared, shared + len(rest))
            seen[b, start:longest, shared + start : shared + longest] = (
                torch.ones(len(rest), len(rest)).tril().bool()
            )
            column, spans_b = longest, []
            for answer in row_answers:
                n = len(answer)
                if n:
                    ids[b, column : column + n] = torch.tensor(list(answer))
                    positions[b, column : column + n] = torch.arange(len(prompts[b]), len(prompts[b]) + n)
                    seen[b, column : column + n, shared + start : shared + longest] = True
                    seen[b, column : column + n, shared + column : shared + column + n] = (
                        torch.ones(n, n).tril().bool()
                    )
                spans_b.append((column, n))
                column += n
            spans.append(spans_b)
        mask = torch.zeros(seen.shape, dtype=self.dtype).masked_fill_(~seen, torch.finfo(self.dtype).min)
        cache = in_place_cache(self.decoder.config, shared + width)  # written in place: no copy per layer
        for layer, (keys, values) in zip(cache.layers, prefix or [], strict=False):
            layer.preload(keys.expand(len(prompts), -1, -1, -1), values.expand(len(prompts), -1, -1, -1))
        hidden = self._hidden(
            ids.to(self.device), mask[:, None].to(self.device), positions.to(self.device), cache
        )
        # the columns whose next-token distribution is read: each row's last prompt token, each answer token
        reads = [(b, longest - 1) for b in range(len(prompts))]
        reads += [(b, c + j) for b, spans_b in enumerate(spans) for c, n in spans_b for j in range(n)]
        at = {read: k for k, read in enumerate(dict.fromkeys(reads))}
        rows_at = torch.tensor([b for b, _ in at], device=self.device)
        cols_at = torch.tensor([c for _, c in at], device=self.device)
        logp = self._logprobs(hidden[rows_at, cols_at])  # [N, V]
        out = []
        for b, (row_answers, spans_b) in enumerate(zip(answers, spans, strict=True)):
            scores = []
            for answer, (column, n) in zip(row_answers, spans_b, strict=True):
                reading = [at[(b, longest - 1)]] + [at[(b, column + j)] for j in range(n)]
                total = sum(
                    (logp[reading[j], t] for j, t in enumerate(answer)), torch.zeros((), device=self.device)
                )
                if closing.numel():
                    total = total + torch.logsumexp(logp[reading[n]].index_select(0, closing), 0)
                scores.append(float(total))
            out.append(scores)
        return out

    def _hidden(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> Any:
        """Final hidden states [B, T, H] of `ids` after the cached tokens, under the 4D additive `mask` (the
        model's logits [B, T, V] when its head is more than a plain Linear)."""
        kwargs = dict(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        if self.head is None:
            return self.model(**kwargs, **cache_kwargs(self.model, cache)).logits.float()
        return self.decoder(**kwargs, **cache_kwargs(self.decoder, cache)).last_hidden_state

    def _logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        """Log-softmax over the vocabulary, the head in float32 (temperature 1)."""
        if self.head is None:
            return F.log_softmax(hidden.float(), dim=-1)
        bias = self.head.bias.float() if getattr(self.head, "bias", None) is not None else None
        return F.log_softmax(F.linear(hidden.float(), self.head.weight.float(), bias), dim=-1)
