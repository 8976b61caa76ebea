"""The learner's decoder pass with the prompt prefix that every row of a micro-batch shares run once.

The steps of one game and seat open with the same chat frame and rules: on TicTacToe with SmolLM2, 141
of a step's ~255 tokens. Their keys and values are the same in every row, so the decoder runs them once,
at batch size 1 and with gradient, and the rows' own tokens attend to that copy repeated. It is the same
function of the parameters as the whole batch (equal up to float rounding), at (B - 1) / B less work on
the prefix, forward and backward. Micro-batches are cut from steps sorted by their prompt's opening
tokens (`micro_batch_order`), so that such rows end up together.
"""

from __future__ import annotations

from typing import Any

from unstable_core.learners.batch import sample_length
from unstable_core.model_loading import cache_kwargs

MIN_SHARED = 16  # shared tokens below which the batch runs whole
ORDER_TOKENS = 64  # opening prompt tokens that sort steps into micro-batches


def micro_batch_order(sample: Any) -> tuple[tuple[int, ...], int]:
    """Sort key of a learner sample (a Step, or a sample with `.step`): its prompt's opening tokens, then
    its length, so that a micro-batch holds steps of one prompt frame and of neighbouring lengths."""
    step = getattr(sample, "step", sample)
    return tuple(step.prompt_ids[:ORDER_TOKENS]), sample_length(sample)


def shared_length(input_ids: Any, last_prompt_index: Any) -> int:
    """Leading tokens that all rows of `input_ids` [B, T] share, stopping before any row's last prompt
    token (whose output is read); 0 when fewer than MIN_SHARED or fewer than two rows."""
    if input_ids.shape[0] < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0)  # [T]
    n = min(int(same.int().cumprod(0).sum()), int(last_prompt_index.min()))
    return n if n >= MIN_SHARED else 0


def can_share(decoder: Any) -> bool:
    """Whether `decoder` runs in float32 with plain full-attention caches in every layer, and without
    activation checkpointing (which turns caches off): then a prefix's keys and values can be shared.
    In bf16 a shared prefix would change the rounding of the rows' log-probs against an unshared pass."""
    import torch

    from unstable_core.inference.hf.kv_cache import full_attention_only

    if getattr(decoder, "gradient_checkpointing", False) or decoder.dtype != torch.float32:
        return False
    return full_attention_only(decoder.config)


def decoder_hidden(decoder: Any, input_ids: Any, attention_mask: Any, last_prompt_index: Any) -> Any:
    """[B, T, H] final hidden states of right-padded `input_ids` [B, T]; the shared prefix (see
    `shared_length`) runs once. The prefix positions' states are those of row 0, the same in every row."""
    n = shared_length(input_ids, last_prompt_index) if can_share(decoder) else 0
    if not n:
        return decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    return cached_pass(decoder, input_ids, attention_mask, n)[0]


def cached_pass(decoder: Any, input_ids: Any, attention_mask: Any, n: int) -> tuple[Any, Any]:
    """[B, T, H] final hidden states of right-padded `input_ids` [B, T] and their KV cache, the first `n`
    tokens (shared by every row) run once at batch 1; n 0: every row whole."""
    import torch
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=decoder.config)
    if not n:
        out = decoder(
            input_ids=input_ids, attention_mask=attention_mask, **cache_kwargs(decoder, cache), use_cache=True
        )
        return out.last_hidden_state, cache
    rows, width = input_ids.shape
    prefix = decoder(
        input_ids=input_ids[:1, :n], **cache_kwargs(decoder, cache), use_cache=True
    ).last_hidden_state
    cache.batch_repeat_interleave(rows)  # [1, ...] -> [B, ...], gradients summed back into the one copy
    positions = torch.arange(n, width, device=input_ids.device).expand(rows, -1)  # [B, T - n]
    rest = decoder(
        input_ids=input_ids[:, n:],
        attention_mask=attention_mask,  # [B, T]: the cached prefix, then each row's own tokens
        position_ids=positions,
        **cache_kwargs(decoder, cache),
        use_cache=True,
    ).last_hidden_state  # [B, T - n, H]
    return torch.cat([prefix.expand(rows, -1, -1), rest], dim=1), cache
