"""One update's micro-batches and what stays fixed through the update, computed once before its first
optimizer step: pi_old (the learner's own log-probs before the update), the truncated behaviour weight
min(pi_old / mu, cap) and, with a KL term, the base model's log-probs.

Each micro-batch is forwarded in one layout (the same steps, in the same order, padded to the same width)
by the gradient-free pass and by every pass of the loss: in bf16 a step's log-probs depend on its batch's
padding and composition (up to 0.28 nats on SmolLM2-135M), which would read as r != 1 before the learner
has moved. Epochs reshuffle whole micro-batches, never the steps inside them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.types import Step


def split_evenly(items: list[Any], parts: int) -> list[list[Any]]:
    """`items` cut in order into `parts` runs whose sizes differ by at most one (numpy's array_split), the
    longer first; empty runs dropped (fewer items than parts): 5 into 4 is 2, 1, 1, 1."""
    size, extra = divmod(len(items), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [items[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]


def cut_micro_batches(
    steps: list[Step], size: int, mini_batches: int, rng: random.Random
) -> list[list[Step]]:
    """The update's micro-batches: `steps` (shuffled when there are several mini-batches) cut evenly into
    max(mini_batches, ceil(n / size)) runs, so each holds at most `size` steps and every mini-batch gets
    at least one."""
    order = list(steps)
    if mini_batches > 1:
        rng.shuffle(order)
    return split_evenly(order, max(mini_batches, math.ceil(len(order) / size)))


@attrs.define
class Fixed:
    """One micro-batch's fixed tensors, [B, T-1] in its own layout (0 off the completion)."""

    old_logp: Any  # log pi_old
    weight: Any  # min(pi_old / mu, cap), no gradient; 1 where mu was not recorded
    ref_logp: Any = None  # log base, with a KL term


@attrs.define
class Layout:
    """The micro-batches of one update, keyed by their steps' identities (steps live through the update)."""

    micro_batches: list[list[Step]] = attrs.field(factory=list)
    fixed: dict[tuple[int, ...], Fixed] = attrs.field(factory=dict)

    def add(self, micro_batch: list[Step], fixed: Fixed) -> None:
        self.micro_batches.append(micro_batch)
        self.fixed[tuple(map(id, micro_batch))] = fixed

    def get(self, micro_batch: Sequence[Step]) -> Fixed:
        """The fixed tensors of exactly this micro-batch (same steps, same order): pi_old and pi must share
        one layout."""
        found = self.fixed.get(tuple(map(id, micro_batch)))
        if found is None:
            raise UnstableError(
                f"these {len(micro_batch)} step(s) are not a micro-batch with fixed pi_old log-probs; "
                "PPOLearner.fix_logprobs(samples) must run before the update's first optimizer step and "
                "each loss pass must take one of the micro-batches it returned"
            )
        return found
