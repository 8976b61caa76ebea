"""load_tokenizer: a folder whose tokenizer_config.json names the generic tokenizers class loads it directly,
without torch (the collector's start), and it tokenizes and templates as AutoTokenizer's does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unstable_core.model_loading import load_tokenizer, resolve_model, tokenizer_class

MESSAGES = [
    {"role": "system", "content": "Play well."},
    {"role": "user", "content": "Your move: [3] or [4]?"},
]


def test_a_generic_tokenizer_loads_without_torch_and_matches_auto_tokenizer(tiny_model):
    code = (
        "import sys; from unstable_core.model_loading import load_tokenizer; "
        f"t = load_tokenizer({tiny_model!r}); print(type(t).__name__, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    name, torch_loaded = out.stdout.split()
    assert name in ("TokenizersBackend", "PreTrainedTokenizerFast") and torch_loaded == "False"

    from transformers import AutoTokenizer

    ours, auto = load_tokenizer(tiny_model), AutoTokenizer.from_pretrained(tiny_model)
    assert type(ours) is type(auto)
    kwargs = {"tokenize": False, "add_generation_prompt": True}
    assert ours.apply_chat_template(MESSAGES, **kwargs) == auto.apply_chat_template(MESSAGES, **kwargs)
    text = "[3] and then [4]\nI play <|im_end|> ok"
    assert ours(text).input_ids == auto(text).input_ids and ours.pad_token is not None


@pytest.mark.parametrize(
    "config",
    [
        {"tokenizer_class": "GPT2Tokenizer"},  # a model's own class: AutoTokenizer knows it
        {
            "tokenizer_class": "TokenizersBackend",
            "auto_map": {"AutoTokenizer": ["x.Tok", None]},
        },  # custom code
        "not json",
    ],
    ids=["model-class", "custom-code", "unreadable"],
)
def test_other_folders_go_through_auto_tokenizer(tmp_path: Path, config):
    from transformers import AutoTokenizer

    text = config if isinstance(config, str) else json.dumps(config)
    (tmp_path / "tokenizer_config.json").write_text(text)
    assert tokenizer_class(resolve_model(str(tmp_path))) is AutoTokenizer
