"""Prefilling a batch's prompts in groups of similar length, so that one long prompt does not pad the rest.

A left-padded batch computes every row to the longest row's width: when seven rows have 10 prompt tokens
left to compute (the rest came from the prefix cache) and one has 130, the padded prefill computes 1,040
positions for 200 real ones, and on a CPU that costs as much as the whole decode. `prefill_groups` splits
the rows, by the number of tokens each has left, into groups that minimise padded positions plus a fixed
cost per forward pass; each group is prefilled into its own cache and `merge_group_caches` lays the groups'
keys and values out as one left-padded batch would have, the padding masked out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

#: the cost of one more forward pass, in prompt positions: on a CPU a pass streams every weight from
#: memory (about 20 positions' compute for SmolLM2); on a GPU padded positions are cheap
PASS_COST_POSITIONS = {"cpu": 24, "cuda": 512}


def prefill_groups(new_tokens: Sequence[int], pass_cost: int) -> list[list[int]]:
    """Row indices in groups, each to be prefilled in one padded forward pass: the split of the rows
    sorted by `new_tokens` that minimises the padded positions computed plus `pass_cost` per pass."""
    order = sorted(range(len(new_tokens)), key=lambda b: new_tokens[b])
    widths = [new_tokens[b] for b in order]
    best = [0.0] + [float("inf")] * len(order)  # best[j]: the cost of the first j sorted rows
    cut = [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        for i in range(j):  # rows i..j-1 in one pass, as wide as its widest, widths[j - 1]
            cost = best[i] + pass_cost + (j - i) * widths[j - 1]
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], len(order)
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    return groups[::-1]


def merge_group_caches(
    target: Any, parts: list[tuple[list[int], int, int, Any]], rows: int, head: int, width: int
) -> None:
    """Fill the empty in-place cache `target` with the groups' caches as one left-padded batch of `rows`:
    each part is (its row indices, its cached prefix length, its prefill width, its cache); a row's cached
    prefix ends at position `head` and its prefilled tokens at `head + width`; the gaps stay zero (masked)."""
    for i, layer in enumerate(target.layers):
        like = parts[0][3].layers[i].keys  # [b, H, n, D]
        keys = like.new_zeros((rows, like.shape[1], head + width, like.shape[-1]))  # [B, H, head + width, D]
        values = torch.zeros_like(keys)
        for index, own_head, own_width, cache in parts:
            at = torch.tensor(index, device=keys.device)
            layer_of_part = cache.layers[i]
            for merged, part in ((keys, layer_of_part.keys), (values, layer_of_part.values)):
                merged[at, :, head - own_head : head] = part[:, :, :own_head]  # the cached prefixes
                merged[at, :, head + width - own_width :] = part[:, :, own_head:]  # the prompts' rest
        layer.preload(keys, values)
