"""A tiny random-weight causal LM with the embedded default's tokenizer: real (a `LlamaForCausalLM` loaded by
`from_pretrained` like any other), only small and untrained. `unstable_core.testing` re-exports it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def tiny_llama(
    tokenizer: Any, hidden_size: int = 32, num_layers: int = 2, tie_word_embeddings: bool = True
) -> Any:
    """A random-weight `LlamaForCausalLM` of the tokenizer's vocabulary (seed torch before calling)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=tie_word_embeddings,
    )
    return LlamaForCausalLM(config)


def make_tiny_model(
    folder: str | os.PathLike, hidden_size: int = 32, num_layers: int = 2, seed: int = 0
) -> str:
    """Write a tiny random-weight Llama (SmolLM2's tokenizer and chat template) to `folder`; return its path."""
    import torch

    from unstable_core.model_loading import DEFAULT_MODEL, load_tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(DEFAULT_MODEL)
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    model = tiny_llama(tok, hidden_size, num_layers)
    model.save_pretrained(folder, safe_serialization=True)
    return str(folder)


def session_tiny_model(tmp_path_factory: Any) -> str:
    """The tiny model of a pytest session (its `tmp_path_factory`), written on first use and shared by every
    conftest that asks for it: the core's and each plugin's tests, which would otherwise build one each."""
    import shutil

    folder = Path(tmp_path_factory.getbasetemp()) / "tiny-model"
    if not folder.is_dir():
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        make_tiny_model(partial)
        os.replace(partial, folder)
    return str(folder)


def make_tiny_adapter(
    base_model: str, folder: str | os.PathLike, target_modules: list[str], seed: int = 0
) -> str:
    """Write a LoRA adapter of `base_model` whose B weights are random, not zero (so that it changes the
    policy), to `folder`; return its path: a checkpoint's adapter, as the learner saves one."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base_model),
        LoraConfig(r=4, lora_alpha=8, target_modules=target_modules),
    )
    torch.manual_seed(seed)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=1.0)
    model.save_pretrained(folder)
    return str(folder)
