"""Helpers for tests and benchmarks: a tiny random-weight causal LM with the embedded default's tokenizer.

The model is real (a `LlamaForCausalLM` loaded by `from_pretrained` like any other), only small and
untrained, so tests exercise the real loading, generation and training code in seconds.
"""

from __future__ import annotations

import os
from pathlib import Path

_TOKENIZER_CACHE: dict[str, str] = {}


def make_tiny_model(
    folder: str | os.PathLike, hidden_size: int = 32, num_layers: int = 2, seed: int = 0
) -> str:
    """Write a tiny random-weight Llama (SmolLM2's tokenizer and chat template) to `folder`; return its path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from unstable_core.models import DEFAULT_MODEL, load_tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(DEFAULT_MODEL)
    tok.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder, safe_serialization=True)
    return str(folder)
