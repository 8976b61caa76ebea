"""Keys and values of prompt prefixes kept from one batch to the next: a game's rules are computed once.

Every turn of a game sends its rules again: on TicTacToe with SmolLM2's chat template, 141 of a turn's
~255 prompt tokens are the same for every turn of a seat, and a CPU batch spends most of its time
computing prompts, not sampling. `PrefixCache` keeps the keys and values of prompts' leading blocks of
`block` tokens, keyed by the adapter that computed them and by every token up to the block's end (a block's
keys and values depend on all the tokens before it, and on nothing after it). A row reuses the longest run
of cached blocks that opens its prompt, leaving at least one prompt token to compute, so its results are
those of the whole prompt up to float rounding. The least recently used blocks go first beyond
`capacity_tokens`, a prompt's later blocks before its earlier ones (a block is of no use without those
before it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import attrs
import torch

#: one cached block: its [H, block, D] keys and values, per layer
Block = list[tuple[torch.Tensor, torch.Tensor]]


@attrs.define
class PrefixCache:
    """Cached prompt blocks by (adapter, the prompt's tokens up to the block's end), least recently used first."""

    capacity_tokens: int = 4096
    block: int = 16
    reused_tokens: int = 0  # prompt tokens whose keys and values came from the cache
    prompt_tokens: int = 0  # prompt tokens of every row looked up
    _blocks: OrderedDict[tuple[str, tuple[int, ...]], Block] = attrs.field(factory=OrderedDict)

    @property
    def enabled(self) -> bool:
        """Whether it can hold a block at all (a capacity below one block turns it off)."""
        return self.capacity_tokens >= self.block

    @property
    def size_tokens(self) -> int:
        """Tokens whose keys and values are held."""
        return len(self._blocks) * self.block

    def lookup(self, adapter: str, prompt: Sequence[int]) -> list[Block]:
        """The cached blocks that open `prompt` under `adapter`, in order; at least one token is left over."""
        found: list[Block] = []
        keys = []
        for end in range(self.block, len(prompt), self.block):
            key = (adapter, tuple(prompt[:end]))
            entry = self._blocks.get(key)
            if entry is None:
                break
            keys.append(key)
            found.append(entry)
        for key in reversed(keys):  # a prompt's first blocks are the last to go: later ones need them
            self._blocks.move_to_end(key)
        self.prompt_tokens += len(prompt)
        self.reused_tokens += len(found) * self.block
        return found

    def store(self, adapter: str, prompt: Sequence[int], start: int, block: Block) -> None:
        """Keep `block`, the keys and values of `prompt[start : start + self.block]` under `adapter`."""
        if not self.enabled:
            return
        key = (adapter, tuple(prompt[: start + self.block]))
        self._blocks[key] = block
        self._blocks.move_to_end(key)
        while self.size_tokens > self.capacity_tokens:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        """Forget every block (adapter names may be reused after this)."""
        self._blocks.clear()


def joined(blocks: list[Block], layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The [H, n * block, D] keys and values of `blocks` at `layer`, in order."""
    keys = torch.cat([b[layer][0] for b in blocks], dim=-2)
    values = torch.cat([b[layer][1] for b in blocks], dim=-2)
    return keys, values
