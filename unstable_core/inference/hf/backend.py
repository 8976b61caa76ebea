"""The transformers backend: any causal LM on CPU or CUDA, batched with left padding, LoRA hot-loading.

Decoding is our own loop over the KV cache rather than `model.generate`, so that each row keeps its
own temperature, top-p, seed and token budget, and the log-probability of every sampled token is that
of the distribution it was sampled from: softmax(logits / T) over the top-p nucleus, renormalised
(`sampling.sampling_logprobs`; T = 0, greedy, is recorded at T = 1): exactly what the learner recomputes
with the run's temperature and top_p. The LM head
and the log-softmax run in float32 whatever the model's dtype, as in the learner. The prompt prefix that
every row of a batch shares (a chat template's system turn, a game's rules) is computed once and its KV
cache repeated for each row; the keys and values of prompts' leading blocks are also kept from one batch
to the next (`prefix_cache`), so that a game's rules, sent again every turn, are computed once per adapter.
Rows whose prompts left very different numbers of tokens to compute are prefilled in groups (`prefill`),
so that one long prompt does not pad the others. Finished rows are dropped from the batch (and from the
cache) as soon as they end.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import attrs
import torch
import torch.nn.functional as F

from unstable_core.inference.base import (
    GenerationOutput,
    GenerationRequest,
    InferenceBackend,
    token_budget,
)
from unstable_core.inference.hf.kv_cache import full_attention_only, in_place_cache
from unstable_core.inference.hf.packed_linear import pack_linear_layers
from unstable_core.inference.hf.peft_pool import BASE, PeftAdapterPool
from unstable_core.inference.hf.prefill import PASS_COST_POSITIONS, merge_group_caches, prefill_groups
from unstable_core.inference.hf.prefix_cache import Block, PrefixCache, joined
from unstable_core.inference.sampling import row_logprobs, sample_tokens
from unstable_core.inference.stops import stop_token_ids
from unstable_core.model_loading import cache_kwargs, load_causal_lm, load_tokenizer, plain_linear_head

MIN_SHARED_PREFIX = 8  # prompt tokens all rows of a batch must share before their prefix is computed once
PREFIX_CACHE_TOKENS = 4096  # prompt tokens whose keys and values are kept across batches (SmolLM2: 190 MB)


@attrs.define
class _Row:
    """One request being decoded: where its output goes, its token budget, what it has produced so far."""

    index: int
    request: GenerationRequest
    budget: int
    adapter: str
    generator: torch.Generator | None
    stops: frozenset[int] = frozenset()  # token ids that end it beside EOS (the request's stop strings)
    token_ids: list[int] = attrs.field(factory=list)
    logprobs: list[float] = attrs.field(factory=list)
    finish_reason: str | None = None


@attrs.frozen
class _Layout:
    """A batch's prompts as one left-padded prefill: row b's first `starts[b]` tokens are already cached
    (they end at column `head`), its other `new_tokens[b]` end at column `head + longest`."""

    starts: list[int]
    new_tokens: list[int]
    head: int
    longest: int
    input_ids: torch.Tensor  # [B, longest]: the tokens to compute, left-padded
    attention: torch.Tensor  # [B, head + longest]: 1 on every real token, cached or not
    positions: torch.Tensor  # [B, longest]: each token's position in its own prompt

    @classmethod
    def of(cls, rows: list[_Row], starts: list[int], pad_id: int, device: str) -> _Layout:
        """The layout of `rows` whose first `starts[b]` prompt tokens are cached."""
        new_tokens = [len(r.request.prompt_ids) - s for r, s in zip(rows, starts, strict=True)]
        head, longest = max(starts), max(new_tokens)
        input_ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), head + longest), dtype=torch.long)
        for b, (row, start) in enumerate(zip(rows, starts, strict=True)):
            rest = row.request.prompt_ids[start:]
            attention[b, head - start : head] = 1
            input_ids[b, longest - len(rest) :] = torch.tensor(rest)
            attention[b, head + longest - len(rest) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, head:]  # 0 at each row's first real token
        return cls(
            starts,
            new_tokens,
            head,
            longest,
            input_ids.to(device),
            attention.to(device),
            positions.to(device),
        )


class TransformersBackend(InferenceBackend):
    """A transformers causal LM (alias, hub id or local folder), batched, with LoRA adapters by path."""

    def __init__(
        self,
        model: str,
        *,
        max_batch_size: int = 32,
        gather_ms: float = 20.0,
        max_loras: int = 8,
        max_model_len: int = 4096,
        device: str | None = None,
        dtype: Any = None,
        seed: int = 0,
        prefix_cache_tokens: int = PREFIX_CACHE_TOKENS,
        packed_linear: bool = True,
    ) -> None:
        super().__init__(
            model,
            max_batch_size=max_batch_size,
            gather_ms=gather_ms,
            max_loras=max_loras,
            max_model_len=max_model_len,
            device=device,
        )
        started = time.perf_counter()
        self._tokenizer = load_tokenizer(model)
        base_model = load_causal_lm(model, device=device, dtype=dtype)
        self.load_s = time.perf_counter() - started
        self.device = str(base_model.device)
        # on CPU the fp32 Linear layers run on weights packed once for oneDNN (decode about 1.5x faster)
        self.packed_layers = pack_linear_layers(base_model) if packed_linear else 0
        self._pool = PeftAdapterPool(base_model, capacity=self.max_loras)
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self.eos_ids = _eos_ids(base_model, self._tokenizer)
        self.pad_id = (
            self._tokenizer.pad_token_id if self._tokenizer.pad_token_id is not None else min(self.eos_ids)
        )
        head = base_model.get_output_embeddings()
        self.vocab_size = head.weight.shape[0]
        # A float32 model's own logits are the fp32 head already; any other dtype gets a float32 copy of
        # the head (V x H x 4 bytes), applied to the last hidden state instead of the model's logits.
        self._fp32_head = head.weight.dtype != torch.float32
        self._head_weight = head.weight.detach().float() if self._fp32_head else None
        self._head_bias = (
            head.bias.detach().float()
            if self._fp32_head and getattr(head, "bias", None) is not None
            else None
        )
        self._lock = threading.Lock()  # one batch at a time: the model and its adapters are shared state
        # else no prefix's keys and values can be reused, nor prompts be prefilled in groups
        self._plain_cache = full_attention_only(base_model.config)
        self.prefix_cache = PrefixCache(prefix_cache_tokens if self._plain_cache else 0)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer of the model (its pad token is the EOS token when it has none)."""
        return self._tokenizer

    @property
    def loaded_adapters(self) -> list[str]:
        """Paths of the LoRA adapters now loaded, least recently used first."""
        return self._pool.lru.paths()

    def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Complete `requests`; a request that cannot run gets an "error" output, the others are unaffected."""
        with self._lock:
            return self._serve(requests)

    def _serve(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        outputs: list[GenerationOutput | None] = [None] * len(requests)
        by_adapter: dict[str | None, list[tuple[int, int]]] = defaultdict(list)  # path -> [(index, budget)]
        for i, request in enumerate(requests):
            budget, problem = token_budget(request, self.max_model_len)
            if problem is None and not all(0 <= t < self.vocab_size for t in request.prompt_ids):
                problem = f"prompt token ids must be in [0, {self.vocab_size}); encode the prompt with this model's tokenizer"
            if problem is not None:
                outputs[i] = GenerationOutput.failure(problem)
            else:
                by_adapter[request.lora_path].append((i, budget))
        paths = [p for p in by_adapter if p is not None]
        # at most max_loras distinct adapters are loaded at once: one chunk of adapters at a time
        chunks = [paths[k : k + self.max_loras] for k in range(0, len(paths), self.max_loras)] or [[]]
        chunks[0] = [None, *chunks[0]] if None in by_adapter else chunks[0]
        for chunk in chunks:
            names, errors = self._pool.prepare([p for p in chunk if p is not None])
            rows = []
            for path in chunk:
                for i, budget in by_adapter[path]:
                    if path in errors:
                        outputs[i] = GenerationOutput.failure(errors[path])
                        continue
                    seed = requests[i].params.seed
                    generator = (
                        self._generator if seed is None else torch.Generator(self.device).manual_seed(seed)
                    )
                    stops = stop_token_ids(self._tokenizer, requests[i].params.stop)
                    rows.append(_Row(i, requests[i], budget, names.get(path, BASE), generator, stops))
            if rows:
                for row in self._decode(rows):
                    outputs[row.index] = self._to_output(row)
        return [
            o if o is not None else GenerationOutput.failure("internal error: request not served")
            for o in outputs
        ]

    @torch.inference_mode()
    def _decode(self, rows: list[_Row]) -> list[_Row]:
        """Sample every row to EOS or its budget, in one left-padded batch over a shared KV cache."""
        # an adapter with a LoRA on lm_head wraps the head, and some models cap or scale their logits: then
        # the model's own logits, cast to float32
        fp32_head = self._fp32_head and plain_linear_head(self._pool.base_model)
        cached = self._cached_blocks(rows)
        reuse = any(cached)
        shared = 0 if reuse else self._shared_prefix(rows)
        # starts[b]: row b's prompt tokens already in the cache before the first forward pass
        starts = [len(c) * self.prefix_cache.block for c in cached] if reuse else [shared] * len(rows)
        batch = _Layout.of(rows, starts, self.pad_id, self.device)
        capacity = batch.head + batch.longest + max(r.budget for r in rows)
        cost = PASS_COST_POSITIONS["cuda" if self.device.startswith("cuda") else "cpu"]
        groups = prefill_groups(batch.new_tokens, cost) if self._plain_cache and not shared else []
        if len(groups) > 1:  # one long prompt would pad the others: rows of similar widths pass together
            cache, logits = self._prefill_in_groups(rows, groups, cached, batch, capacity, fp32_head)
        else:
            cache = in_place_cache(self._pool.base_model.config, capacity)
            if reuse:
                _load_blocks(cache, cached, batch.head)
            elif shared:
                self._prefill_prefix(rows, shared, cache)
            logits = self._forward(rows, batch.input_ids, batch.attention, batch.positions, cache, fp32_head)
        self._keep_blocks(rows, cached, starts, batch.head, batch.head + batch.longest, cache)
        attention, positions = batch.attention, batch.positions
        active = list(rows)
        while True:
            params = [r.request.params for r in active]
            logprobs = row_logprobs(logits, params)  # [B, V]: the distribution each row samples from
            tokens = sample_tokens(logits, params, [r.generator for r in active], logprobs)  # [B]
            token_logprobs = logprobs.gather(-1, tokens[:, None])[:, 0]  # [B]
            keep = []
            for b, (row, token, logprob) in enumerate(
                zip(active, tokens.tolist(), token_logprobs.tolist(), strict=True)
            ):
                row.token_ids.append(token)
                row.logprobs.append(logprob)
                if token in self.eos_ids or token in row.stops:
                    row.finish_reason = "stop"
                elif len(row.token_ids) >= row.budget:
                    row.finish_reason = "length"
                else:
                    keep.append(b)
            if not keep:
                break
            if len(keep) < len(active):  # drop finished rows from the batch and the cache
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                tokens, attention, positions = tokens[index], attention[index], positions[index]
                active = [active[b] for b in keep]
            attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=-1)  # [B, T+1]
            positions = positions[:, -1:] + 1  # [B, 1]
            logits = self._forward(active, tokens[:, None], attention, positions, cache, fp32_head)
        return rows

    def _prefill_in_groups(
        self,
        rows: list[_Row],
        groups: list[list[int]],
        cached: list[list[Block]],
        batch: _Layout,
        capacity: int,
        fp32_head: bool,
    ) -> tuple[Any, torch.Tensor]:
        """Prefill each group of rows in its own pass, only as wide as its widest row; the caches merged
        into one laid out as `batch`, and the [B, V] next-token logits of every row."""
        config = self._pool.base_model.config
        logits = torch.empty((len(rows), self.vocab_size), device=self.device)
        head, end = batch.head, batch.head + batch.longest
        parts = []
        for group in groups:
            own_head = max(batch.starts[b] for b in group)
            width = max(batch.new_tokens[b] for b in group)
            part = in_place_cache(config, own_head + width)
            if own_head:
                _load_blocks(part, [cached[b] for b in group], own_head)
            at = torch.tensor(group, device=self.device)
            # the group's columns of the batch's mask: its prefixes end at `head`, its prompts at `end`
            columns = torch.cat([torch.arange(head - own_head, head), torch.arange(end - width, end)])
            logits[at] = self._forward(
                [rows[b] for b in group],
                batch.input_ids[at, batch.longest - width :],
                batch.attention[at][:, columns.to(self.device)],
                batch.positions[at, batch.longest - width :],
                part,
                fp32_head,
            )
            parts.append((group, own_head, width, part))
        cache = in_place_cache(config, capacity)
        merge_group_caches(cache, parts, len(rows), head, batch.longest)
        return cache, logits

    def _forward(
        self,
        rows: list[_Row],
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        fp32_head: bool,
    ) -> torch.Tensor:
        """One forward pass of `rows` over `cache` (which it extends): the [B, V] float32 next-token logits."""
        extra = self._pool.forward_kwargs([r.adapter for r in rows])
        out = self._pool.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            **cache_kwargs(self._pool.model, cache),
            use_cache=True,
            logits_to_keep=1,
            output_hidden_states=fp32_head,
            **extra,
        )
        if fp32_head:
            hidden = out.hidden_states[-1][:, -1, :].float()  # [B, H] after the final norm
            return F.linear(hidden, self._head_weight, self._head_bias)  # [B, V] fp32 next-token logits
        return out.logits[:, -1, :].float()  # [B, V]

    def _shared_prefix(self, rows: list[_Row]) -> int:
        """How many leading prompt tokens all `rows` share, to be computed once (0: not worth it, or the
        rows use different adapters, whose keys and values differ). Each row keeps at least one token of
        its own to run."""
        if len(rows) < 2 or len({r.adapter for r in rows}) > 1:
            return 0
        prompts = [r.request.prompt_ids for r in rows]
        first, n = prompts[0], min(len(p) for p in prompts) - 1
        for other in prompts[1:]:
            n = next((i for i in range(n) if other[i] != first[i]), n)
        return n if n >= MIN_SHARED_PREFIX else 0

    def _cached_blocks(self, rows: list[_Row]) -> list[list[Block]]:
        """Per row, the cached blocks that open its prompt under its adapter."""
        if not self.prefix_cache.enabled:
            return [[] for _ in rows]
        return [self.prefix_cache.lookup(r.adapter, r.request.prompt_ids) for r in rows]

    def _keep_blocks(
        self,
        rows: list[_Row],
        cached: list[list[Block]],
        starts: list[int],
        head: int,
        width: int,
        cache: Any,
    ) -> None:
        """Cache the whole blocks of each row's prompt that were not cached yet, from the prefilled `cache`
        ([B, H, width, D]: row b's first `starts[b]` tokens end at `head`, its other tokens at `width`)."""
        if not self.prefix_cache.enabled:
            return
        size = self.prefix_cache.block
        for b, (row, start) in enumerate(zip(rows, starts, strict=True)):
            prompt = row.request.prompt_ids
            for k in reversed(range(len(cached[b]), len(prompt) // size)):  # the first block is the newest
                j = torch.arange(k * size, (k + 1) * size, device=self.device)
                at = torch.where(j < start, head - start + j, width - len(prompt) + j)  # cache positions
                block = [
                    (x.keys[b].index_select(1, at), x.values[b].index_select(1, at)) for x in cache.layers
                ]
                self.prefix_cache.store(row.adapter, prompt, k * size, block)

    def _prefill_prefix(self, rows: list[_Row], shared: int, cache: Any) -> None:
        """Fill the empty `cache` with the rows' shared prefix: computed once, repeated for every row."""
        model = self._pool.model
        extra = self._pool.forward_kwargs([rows[0].adapter])
        prefix = torch.tensor([rows[0].request.prompt_ids[:shared]], device=self.device)  # [1, P]
        model(input_ids=prefix, **cache_kwargs(model, cache), use_cache=True, logits_to_keep=1, **extra)
        cache.batch_repeat_interleave(len(rows))

    def _to_output(self, row: _Row) -> GenerationOutput:
        text = self._tokenizer.decode(row.token_ids, skip_special_tokens=True)
        return GenerationOutput(
            text=text,
            token_ids=row.token_ids,
            logprobs=row.logprobs,
            finish_reason=row.finish_reason or "length",
        )

    def _release(self) -> None:
        self._pool = PeftAdapterPool(None, capacity=self.max_loras)
        self.prefix_cache.clear()  # adapter names start again
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()


def _load_blocks(cache: Any, cached: list[list[Block]], head: int) -> None:
    """Fill the empty `cache` with each row's cached prefix, right-aligned in `head` positions (the
    positions before a shorter prefix are padding, masked out)."""
    for i, layer in enumerate(cache.layers):
        parts = [joined(blocks, i) if blocks else None for blocks in cached]
        like = next(p for p in parts if p is not None)[0]  # [H, n, D]
        keys = like.new_zeros((len(cached), like.shape[0], head, like.shape[-1]))  # [B, H, head, D]
        values = torch.zeros_like(keys)
        for b, part in enumerate(parts):
            if part is not None:
                n = part[0].shape[-2]
                keys[b, :, head - n :], values[b, :, head - n :] = part
        layer.preload(keys, values)


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every token id that ends a completion: the generation config's EOS ids and the tokenizer's."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            ids.update([eos] if isinstance(eos, int) else eos)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
