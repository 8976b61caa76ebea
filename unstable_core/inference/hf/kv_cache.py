"""A KV cache layer that writes each step's keys and values in place instead of concatenating.

transformers' DynamicLayer concatenates the whole cache with each new token: at batch 8 and a few hundred
prompt tokens that copy is over a third of a CPU decode step. `GrowingLayer` keeps a buffer with room for
the whole completion and writes into it; the model reads a view of the filled part. Only plain
full-attention layers are replaced (`in_place_cache`): sliding-window or other layers stay as they are.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A DynamicLayer over a preallocated [B, H, capacity, D] buffer (doubled if ever outgrown)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new [B, H, n, D] keys and values after the cached ones; views of all of them."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self._keys is None or self.length + n > self._keys.shape[-2]:
            self._grow(key_states, value_states, self.length + n)
        assert self._keys is not None and self._values is not None
        self._keys[..., self.length : self.length + n, :] = key_states
        self._values[..., self.length : self.length + n, :] = value_states
        self.length += n
        self._view()
        return self.keys, self.values

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, needed: int) -> None:
        size = max(needed, self.capacity, 2 * (self._keys.shape[-2] if self._keys is not None else 0))
        keys = key_states.new_empty((*key_states.shape[:-2], size, key_states.shape[-1]))
        values = value_states.new_empty((*value_states.shape[:-2], size, value_states.shape[-1]))
        if self._keys is not None and self._values is not None and self.length:
            keys[..., : self.length, :] = self._keys[..., : self.length, :]
            values[..., : self.length, :] = self._values[..., : self.length, :]
        self._keys, self._values = keys, values

    def _view(self) -> None:
        if self._keys is not None and self._values is not None:
            self.keys = self._keys[..., : self.length, :]
            self.values = self._values[..., : self.length, :]

    def preload(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Start the empty layer with the [B, H, n, D] `keys` and `values` (prefixes computed earlier)."""
        self.lazy_initialization(keys, values)
        self._grow(keys, values, keys.shape[-2])
        assert self._keys is not None and self._values is not None
        n = keys.shape[-2]
        self._keys[..., :n, :] = keys
        self._values[..., :n, :] = values
        self.length = n
        self._view()

    def get_seq_length(self) -> int:
        """Tokens cached."""
        return self.length

    def reset(self) -> None:
        """Empty the layer (the buffer is dropped)."""
        super().reset()
        self.length = 0
        self._keys = self._values = None

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last `-tokens_to_remove` tokens (a negative count, as DynamicLayer takes it)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of tokens to remove, got {tokens_to_remove}")
        self.length = max(0, self.length + tokens_to_remove)
        self._view()

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row `repeats` times (a shared prefix's cache, for each row of a batch)."""
        if self._keys is not None and self._values is not None:
            self._keys = self._keys.repeat_interleave(repeats, dim=0)
            self._values = self._values.repeat_interleave(repeats, dim=0)
            self._view()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows `indices` (finished rows leave the batch)."""
        if self._keys is not None and self._values is not None:
            self._keys = self._keys[indices]
            self._values = self._values[indices]
            self._view()


def full_attention_only(config: Any) -> bool:
    """Whether every layer of a model of `config` caches plain full-attention keys and values (no sliding
    window or other kind): then a prompt prefix's keys and values can be computed once and reused."""
    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=config).layers)


def in_place_cache(config: Any, capacity: int) -> DynamicCache:
    """A DynamicCache for a model of `config` whose full-attention layers are GrowingLayers with room for
    `capacity` tokens."""
    cache = DynamicCache(config=config)
    cache.layers = [
        GrowingLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    return cache
