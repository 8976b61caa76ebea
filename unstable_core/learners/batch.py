"""Turning steps into training tensors: the exact sampled token ids, right-padded, with a loss mask that
is 1 on completion tokens only (never on prompt or padding)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.types import Step


@attrs.define
class TokenBatch:
    """A right-padded micro-batch. All tensors are [B, T] except `last_prompt_index` [B]."""

    input_ids: Any  # [B, T] long: prompt_ids + completion_ids, then padding
    attention_mask: Any  # [B, T] long: 1 on real tokens
    completion_mask: Any  # [B, T] bool: True on completion tokens only
    last_prompt_index: Any  # [B] long: position of each row's last prompt token (where V(s) is read)

    @property
    def target_mask(self) -> Any:
        """[B, T-1] bool: which next-token predictions enter the loss (aligned with `input_ids[:, 1:]`)."""
        return self.completion_mask[:, 1:]


def truncate(prompt: list[int], completion: list[int], max_len: int | None) -> tuple[list[int], list[int]]:
    """Fit prompt + completion into `max_len` tokens: drop prompt tokens from the left (keeping at least
    one, which predicts the first completion token); if the completion alone is too long, cut its end."""
    if max_len is None or len(prompt) + len(completion) <= max_len:
        return prompt, completion
    if len(completion) > max_len - 1:
        return prompt[-1:], completion[: max_len - 1]
    return prompt[len(prompt) + len(completion) - max_len :], completion


def collate(
    batch: Sequence[Step], *, pad_token_id: int, max_train_len: int | None = None, device: Any = "cpu"
) -> TokenBatch:
    """Tensors of a list of steps, built from their exact `prompt_ids` and `completion_ids`."""
    import torch

    if not batch:
        raise UnstableError("cannot collate an empty batch; pass at least one Step")
    rows = []
    for step in batch:
        if not step.prompt_ids:
            raise UnstableError(
                f"step (game {step.game_idx}, player {step.pid}, turn {step.turn}) has no prompt_ids; "
                "the collector must record the exact prompt token ids"
            )
        rows.append(truncate(list(step.prompt_ids), list(step.completion_ids), max_train_len))
    width = max(len(p) + len(c) for p, c in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    completion_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    last_prompt_index = torch.empty(len(rows), dtype=torch.long)
    for b, (prompt, completion) in enumerate(rows):
        n_p, n = len(prompt), len(prompt) + len(completion)
        input_ids[b, :n] = torch.tensor(prompt + completion, dtype=torch.long)
        attention_mask[b, :n] = 1
        completion_mask[b, n_p:n] = True
        last_prompt_index[b] = n_p - 1
    return TokenBatch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        completion_mask=completion_mask.to(device),
        last_prompt_index=last_prompt_index.to(device),
    )


def completion_logprobs(logits: Any, batch: TokenBatch) -> Any:
    """log pi(y_t | x, y_<t) of every sampled token, [B, T-1] aligned with `input_ids[:, 1:]`; exactly 0
    (and gradient-free) where `batch.target_mask` is False (prompt and padding).

    The log-softmax runs only at the N positions that predict a completion token: prompts are most of
    a game's tokens, and the vocabulary axis is the widest in the model.
    """
    import torch

    mask = batch.target_mask  # [B, T-1]
    rows = logits[:, :-1][mask].float()  # [N, V]: position t predicts token t+1
    targets = batch.input_ids[:, 1:][mask]  # [N]
    picked = rows.log_softmax(dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [N]
    zeros = torch.zeros(mask.shape, dtype=picked.dtype, device=picked.device)  # [B, T-1]
    return zeros.masked_scatter(mask, picked)
