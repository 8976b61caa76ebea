"""Stop strings: a completion ends at the first token whose text holds one (that token kept, as EOS is).

The `move` template's answer is `[` + the completion, and a game reads the move up to the first `]`: what
a model writes after it is never played, yet it was sampled, trained on and paid for in generation time.
Matching whole tokens is exact for single characters such as `]` (a character lies within one token) and
is the same rule for every backend (vLLM takes the ids as `stop_token_ids`).
"""

from __future__ import annotations

from typing import Any

_CACHE: dict[tuple[int, tuple[str, ...]], frozenset[int]] = {}


def stop_token_ids(tokenizer: Any, stops: tuple[str, ...]) -> frozenset[int]:
    """The ids of `tokenizer`'s tokens whose text contains one of `stops` (computed once per tokenizer)."""
    if not stops:
        return frozenset()
    key = (id(tokenizer), tuple(stops))
    found = _CACHE.get(key)
    if found is None:
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        found = _CACHE[key] = frozenset(i for i, text in enumerate(texts) if any(s in text for s in stops))
    return found
