"""Turning steps into training tensors: the exact sampled token ids, right-padded, with a loss mask that
is 1 on completion tokens only (never on prompt or padding)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.learners.precision import float32_only
from unstable_core.types import Step


@attrs.define
class TokenBatch:
    """A right-padded micro-batch. All tensors are [B, T] or [B, T-1] except `last_prompt_index` [B]."""

    input_ids: Any  # [B, T] long: prompt_ids + completion_ids, then padding
    attention_mask: Any  # [B, T] long: 1 on real tokens
    completion_mask: Any  # [B, T] bool: True on completion tokens only
    last_prompt_index: Any  # [B] long: position of each row's last prompt token (where V(s) is read)
    behaviour_logprobs: Any  # [B, T-1] float: log mu(y_t) recorded when sampling, aligned with targets
    behaviour_mask: Any  # [B, T-1] bool: target positions whose behaviour log-prob was recorded
    fresh: Any = None  # [B] bool: rows sampled by the policy version being trained (lag 0); None: unknown

    @property
    def target_mask(self) -> Any:
        """[B, T-1] bool: which next-token predictions enter the loss (aligned with `input_ids[:, 1:]`)."""
        return self.completion_mask[:, 1:]


def too_long(step: Step, max_train_len: int | None) -> bool:
    """Whether prompt + completion exceed `max_train_len`: such a step is dropped, never cut, because a
    cut prompt is a context the model never sampled from."""
    return max_train_len is not None and sample_length(step) > max_train_len


def sample_length(sample: Any) -> int:
    """Tokens of a learner sample once collated: a Step's, or the `.step` of a sample wrapping one (A2C)."""
    step = getattr(sample, "step", sample)
    return len(step.prompt_ids) + len(step.completion_ids)


def collate(
    batch: Sequence[Step], *, pad_token_id: int, device: Any = "cpu", policy_version: int | None = None
) -> TokenBatch:
    """Tensors of a list of steps, built from their exact `prompt_ids`, `completion_ids` and `logprobs`;
    with `policy_version` (the learner's), `fresh` marks the steps that version sampled."""
    import torch

    if not batch:
        raise UnstableError("cannot collate an empty batch; pass at least one Step")
    for step in batch:
        if not step.prompt_ids:
            raise UnstableError(
                f"step (game {step.game_idx}, player {step.pid}, turn {step.turn}) has no prompt_ids; "
                "the collector must record the exact prompt token ids"
            )
    width = max(map(sample_length, batch))
    input_ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    completion_mask = torch.zeros((len(batch), width), dtype=torch.bool)
    last_prompt_index = torch.empty(len(batch), dtype=torch.long)
    behaviour = torch.zeros((len(batch), max(width - 1, 1)), dtype=torch.float32)
    behaviour_mask = torch.zeros((len(batch), max(width - 1, 1)), dtype=torch.bool)
    for b, step in enumerate(batch):
        n_p, n = len(step.prompt_ids), len(step.prompt_ids) + len(step.completion_ids)
        input_ids[b, :n] = torch.tensor(list(step.prompt_ids) + list(step.completion_ids), dtype=torch.long)
        attention_mask[b, :n] = 1
        completion_mask[b, n_p:n] = True
        last_prompt_index[b] = n_p - 1
        if len(step.logprobs) == n - n_p and n > n_p:  # position t-1 predicts token t
            behaviour[b, n_p - 1 : n - 1] = torch.tensor(list(step.logprobs), dtype=torch.float32)
            behaviour_mask[b, n_p - 1 : n - 1] = True
    return TokenBatch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        completion_mask=completion_mask.to(device),
        last_prompt_index=last_prompt_index.to(device),
        behaviour_logprobs=behaviour[:, : width - 1].to(device),
        behaviour_mask=behaviour_mask[:, : width - 1].to(device),
        fresh=None
        if policy_version is None
        else torch.tensor([s.policy_version == policy_version for s in batch], device=device),
    )


def _scatter(mask: Any, picked: Any) -> Any:
    """[B, T-1] zeros with `picked` [N] written at the True positions of `mask`."""
    import torch

    zeros = torch.zeros(mask.shape, dtype=picked.dtype, device=picked.device)
    return zeros.masked_scatter(mask, picked)


def tempered_logprobs(
    logits: Any, targets: Any, temperature: float, entropy: bool = False, top_p: float = 1.0
) -> Any:
    """The sampler's log-prob of each target in float32, per row: [N, V], [N] -> [N]: log softmax(logits / T),
    renormalised over the top-p nucleus when top_p < 1 (`inference.sampling.sampling_logprobs`, the backends'
    definition). T = 0 (greedy) counts as 1 with no nucleus. With `entropy`, also the entropy of each row's
    sampling distribution: a pair of [N] tensors."""
    import torch

    from unstable_core.inference.sampling import sampling_logprobs

    log_probs = sampling_logprobs(logits, temperature, top_p, targets=targets)  # [N, V]
    picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not entropy:
        return picked
    finite = log_probs.clamp(min=torch.finfo(log_probs.dtype).min)  # outside the nucleus 0 * -inf is NaN
    return picked, -(log_probs.exp() * finite).sum(dim=-1)


def _scattered(mask: Any, result: Any) -> Any:
    """`_scatter` of a tensor or of each tensor of a pair."""
    if isinstance(result, tuple):
        return tuple(_scatter(mask, r) for r in result)
    return _scatter(mask, result)


def completion_logprobs(
    logits: Any, batch: TokenBatch, temperature: float = 1.0, entropy: bool = False, top_p: float = 1.0
) -> Any:
    """log pi_T(y_t | x, y_<t) of every sampled token from full logits [B, T, V] -> [B, T-1], aligned with
    `input_ids[:, 1:]`; exactly 0 (and gradient-free) where `batch.target_mask` is False. With `entropy`,
    also the tempered policy's entropy at the same positions: a pair of [B, T-1] tensors."""
    mask = batch.target_mask  # [B, T-1]
    rows = logits[:, :-1][mask]  # [N, V]: position t predicts token t+1
    return _scattered(
        mask, tempered_logprobs(rows, batch.input_ids[:, 1:][mask], temperature, entropy, top_p)
    )


def head_logprobs(
    hidden: Any,
    head: Any,
    batch: TokenBatch,
    temperature: float = 1.0,
    entropy: bool = False,
    top_p: float = 1.0,
) -> Any:
    """Like `completion_logprobs`, from the final hidden states [B, T, H] and the LM head (a Linear).

    The head runs only at the N positions that predict a completion token (prompts are most of a game's
    tokens, the vocabulary the widest axis) and in float32 whatever the model's dtype: in bf16 the head's
    rounding alone moves log-probs by up to 0.2 nats, which would read as an off-policy gap.
    """
    import torch.nn.functional as F

    mask = batch.target_mask  # [B, T-1]
    h = hidden[:, :-1][mask].float()  # [N, H]
    bias = head.bias.float() if getattr(head, "bias", None) is not None else None
    with float32_only(h.device):  # also under the learner's bf16 autocast
        logits = F.linear(h, head.weight.float(), bias)  # [N, V] in fp32
    return _scattered(
        mask, tempered_logprobs(logits, batch.input_ids[:, 1:][mask], temperature, entropy, top_p)
    )
