"""Prompt templates and render_prompt, with SmolLM2's real tokenizer."""

import subprocess
import sys

import pytest

from unstable_core.errors import UnstableError
from unstable_core.games.templates import TEMPLATES, answer_prompt, get_template, render_prompt

OBS = (
    "[GAME] You are Player 0 in Tic Tac Toe.\n 0 | 1 | 2 \n---+---+---\n 3 | O | 5 \n"
    "Available Moves: '[0]', '[1]', '[2]', '[3]', '[5]'  {braces} \\boxed{} ünïcode"
)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_builtin_names():
    assert set(TEMPLATES) == {
        "default",
        "move",
        "qwen3-zs",
        "qwen3-sp",
        "qwen3-reasoning",
        "task",
        "gemma3-zs",
        "llama-instruct-zs",
    }


def test_qwen3_zs_text():
    expected = (
        "<|im_start|>user\nYou are playing a two-player zero-sum game. Make valid actions to win.\n"
        "Observation: OBS\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert TEMPLATES["qwen3-zs"]("OBS", None) == expected


def test_named_templates_frame_the_observation():
    assert TEMPLATES["qwen3-sp"]("X", None).startswith(
        "<|im_start|>user\nYou are playing a single-player game."
    )
    assert TEMPLATES["qwen3-reasoning"]("X", None).endswith(
        "Question: X<|im_end|>\n<|im_start|>assistant\n<think>"
    )
    assert TEMPLATES["gemma3-zs"]("X", None).startswith("<bos><start_of_turn>user\n")
    assert TEMPLATES["gemma3-zs"]("X", None).endswith("<end_of_turn>\n<start_of_turn>model\n")
    llama = TEMPLATES["llama-instruct-zs"]("X", None)
    assert "<|start_header_id|>user<|end_header_id|>\n\nCurrent Observation: X\n" in llama
    assert llama.endswith("<|start_header_id|>assistant<|end_header_id|>")


def test_default_uses_the_tokenizers_chat_template(tokenizer):
    text = TEMPLATES["default"](OBS, tokenizer)
    assert text.startswith("<|im_start|>")  # SmolLM2's ChatML template
    assert text.endswith("<|im_start|>assistant\n")
    assert f"<|im_start|>user\nYou are playing a game. Make valid moves to win.\nObservation: {OBS}\n" in text
    assert "\\boxed{}" in text


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_render_prompt_round_trips(name, tokenizer):
    text, ids = render_prompt(name, OBS, tokenizer)
    assert text == TEMPLATES[name](OBS, tokenizer)
    assert tokenizer.decode(ids) == text
    assert ids == tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize(("name", "prefix"), [("move", "["), ("default", "")])
def test_an_answer_prompt_renders_as_a_game_and_knows_its_answer_prefix(name, prefix, tokenizer):
    """Resolved once for a tokenizer, a template renders each observation as the game loop does."""
    prompt = answer_prompt(name, tokenizer)
    assert prompt.prefix == prefix
    for observation in (OBS, "x"):
        assert prompt.render(observation) == render_prompt(name, observation, tokenizer)
    with pytest.raises(UnstableError, match="unknown prompt template 'nope'"):
        answer_prompt("nope", tokenizer)


def test_render_prompt_encodes_chatml_markers_as_special_tokens(tokenizer):
    _, ids = render_prompt("qwen3-zs", "x", tokenizer)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_end|>")) == 1


def test_render_prompt_with_custom_templates(tokenizer):
    text, ids = render_prompt(
        "plain", "abc", tokenizer, templates={"plain": lambda obs, tok: f"Obs: {obs}\n"}
    )
    assert text == "Obs: abc\n"
    assert tokenizer.decode(ids) == text


def test_unknown_template_names_the_known_ones():
    with pytest.raises(
        UnstableError, match=r"unknown prompt template 'nope'; use one of: default, gemma3-zs"
    ):
        get_template("nope")


def test_templates_module_is_import_light():
    code = (
        "import sys, unstable_core.games.templates, unstable_core.games;"
        "print(any(m in sys.modules for m in ('torch', 'transformers', 'textarena')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
