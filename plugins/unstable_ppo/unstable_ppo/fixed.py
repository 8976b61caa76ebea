"""Log-probs that stay fixed through one PPO update, computed once before its first optimizer step.

PPO's ratio needs the log-prob of the policy *before* the update (mu where the backend recorded it). A step
with no recorded log-probs gets pi_old from a gradient-free pass before epoch 0: taking the current pass's
own, detached, would make every later epoch and mini-batch see a ratio of 1 and lose the trust region.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.learners import TokenBatch
from unstable_core.types import Step


def recorded(step: Step) -> bool:
    """Whether the backend recorded one behaviour log-prob per completion token (as `collate` requires)."""
    return len(step.logprobs) == len(step.completion_ids)


def completion_slices(steps: Sequence[Step], per_token: Any) -> list[Any]:
    """Each step's [n_completion] row of a [B, T-1] tensor (position t - 1 predicts token t), copied."""
    out = []
    for b, s in enumerate(steps):
        n_p, n = len(s.prompt_ids), len(s.prompt_ids) + len(s.completion_ids)
        out.append(per_token[b, n_p - 1 : n - 1].clone())
    return out


def scatter_rows(steps: Sequence[Step], rows: Sequence[Any], like: Any) -> Any:
    """[B, T-1] zeros shaped like `like` with each step's [n_completion] row at its completion positions."""
    import torch

    out = torch.zeros_like(like)
    for b, (s, row) in enumerate(zip(steps, rows, strict=True)):
        n_p = len(s.prompt_ids)
        out[b, n_p - 1 : n_p - 1 + row.shape[0]] = row
    return out


@attrs.define
class FixedLogprobs:
    """Per-step completion log-probs keyed by the step object's id (steps live through the whole update)."""

    name: str
    rows: dict[int, Any] = attrs.field(factory=dict)

    def fill(
        self, steps: Sequence[Step], compute: Callable[[TokenBatch], Any], collate: Callable, size: int
    ) -> None:
        """Compute `compute(collate(chunk))` ([B, T-1], no gradient) for `steps` in chunks of `size`."""
        import torch

        with torch.no_grad():
            for lo in range(0, len(steps), size):
                chunk = steps[lo : lo + size]
                for s, row in zip(chunk, completion_slices(chunk, compute(collate(chunk))), strict=True):
                    self.rows[id(s)] = row

    def batch(self, steps: Sequence[Step], like: Any, wanted: Sequence[bool] | None = None) -> Any:
        """[B, T-1] log-probs of `steps` (0 off the completion and where `wanted` is False)."""
        wanted = [True] * len(steps) if wanted is None else wanted
        missing = [s for s, w in zip(steps, wanted, strict=True) if w and id(s) not in self.rows]
        if missing:
            raise UnstableError(
                f"{len(missing)} step(s) have no fixed {self.name} log-probs; PPOLearner.fix_logprobs(samples) "
                "must run before the update's first optimizer step"
            )
        rows = [
            self.rows[id(s)] if w else like.new_zeros(len(s.completion_ids))
            for s, w in zip(steps, wanted, strict=True)
        ]
        return scatter_rows(steps, rows, like)
