"""Prompt templates: callables `(observation, tokenizer) -> prompt text`, and rendering a prompt to token ids.

`default` uses the tokenizer's own chat template, so it fits any instruct model; `move` too, with the
answer opened by `[` for the model to complete (a template's `answer_prefix` attribute: the game loop reads
the action from prefix + completion) and closed at the first `]` (its `answer_stop`: sampling stops there). The named ones are the fixed chat strings of UnstableBaselines for
Qwen3, Gemma 3 and Llama instruct models; they ignore the tokenizer. This module stays import-light (no torch, no transformers): listing plugins imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.games.prompt_tokens import prompt_encoder, template_frame

Template = Callable[[str, Any], str]

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
ZERO_SUM_INTRO = "You are playing a two-player zero-sum game. Make valid actions to win."
SINGLE_PLAYER_INTRO = "You are playing a single-player game. Make valid actions to solve it completely."


def default_template(observation: str, tokenizer: Any) -> str:
    """The tokenizer's own chat template around one user message: the observation and the \\boxed{} rule."""
    content = (
        f"You are playing a game. Make valid moves to win.\nObservation: {observation}\n"
        # The example matters for small models: SmolLM2-135M never boxes its move without one.
        "Reply with your move inside \\boxed{}, for example \\boxed{[3]}."
    )
    messages = [{"role": "user", "content": content}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


TASK_INSTRUCTION = "Put your final answer within \\boxed{}."


def task_template(observation: str, tokenizer: Any) -> str:
    """The tokenizer's chat template around a task's question and the \\boxed{} rule (single-turn tasks)."""
    messages = [{"role": "user", "content": f"{observation}\n{TASK_INSTRUCTION}"}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


MOVE_PREFIX = "["  # TextArena's move syntax opens with a bracket: `[4]`, `[bet]`, `[col 3]`
MOVE_END = "]"  # and the move ends at the first closing one: generation stops there


def move_template(observation: str, tokenizer: Any) -> str:
    """The tokenizer's chat template around the observation, with the assistant's answer opened by `[`: the
    model completes the move (`4]`, `bet]`), and the answer read for the action is `[` + the completion.
    A small model that rarely writes a valid move from scratch (SmolLM2-135M on Kuhn Poker: 0 to 6% of
    its answers) mostly has to choose one. For an API seat (its tokenizer keeps chat messages) nothing is
    opened: the messages are sent as they are."""
    from unstable_core.inference.chat_prompt import chat_messages

    content = (
        f"You are playing a game. Make valid moves to win.\nObservation: {observation}\nReply with your move."
    )
    messages = [{"role": "user", "content": content}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return prompt if chat_messages(prompt) is not None else prompt + MOVE_PREFIX


move_template.answer_prefix = MOVE_PREFIX  # type: ignore[attr-defined]
move_template.answer_stop = MOVE_END  # type: ignore[attr-defined]
# the observation enters these two as it is, once, between fixed text: `render_prompt` may reuse the frame
default_template.observation_slot = True  # type: ignore[attr-defined]
move_template.observation_slot = True  # type: ignore[attr-defined]
task_template.observation_slot = True  # type: ignore[attr-defined]


def answer_prefix(template: Template) -> str:
    """The text a template's prompt ends with that belongs to the answer (`move`: `[`), else ""."""
    return str(getattr(template, "answer_prefix", ""))


def answer_stop(template: Template) -> str:
    """Where an answer the template opened ends (`move`: `]`; sampling stops there), else ""."""
    return str(getattr(template, "answer_stop", ""))


def qwen3_zs(observation: str, tokenizer: Any = None) -> str:
    """Qwen3 chat format, two-player zero-sum game, reasoning then a \\boxed{} answer."""
    return (
        f"<|im_start|>user\n{ZERO_SUM_INTRO}\nObservation: {observation}\n{BOXED_INSTRUCTION}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def qwen3_sp(observation: str, tokenizer: Any = None) -> str:
    """Qwen3 chat format, single-player game, reasoning then a \\boxed{} answer."""
    return (
        f"<|im_start|>user\n{SINGLE_PLAYER_INTRO}\nObservation: {observation}\n{BOXED_INSTRUCTION}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def qwen3_reasoning(observation: str, tokenizer: Any = None) -> str:
    """Qwen3 chat format for a question, with the assistant turn opened inside a <think> block."""
    return (
        f"<|im_start|>user\n{BOXED_INSTRUCTION}\nQuestion: {observation}<|im_end|>\n"
        "<|im_start|>assistant\n<think>"
    )


def gemma3_zs(observation: str, tokenizer: Any = None) -> str:
    """Gemma 3 chat format, two-player zero-sum game, reasoning then a \\boxed{} answer."""
    return (
        f"<bos><start_of_turn>user\n{ZERO_SUM_INTRO}\nObservation: {observation}\n{BOXED_INSTRUCTION}"
        "<end_of_turn>\n<start_of_turn>model\n"
    )


def llama_instruct_zs(observation: str, tokenizer: Any = None) -> str:
    """Llama 3 instruct chat format: a system turn with the game rule, the observation as the user turn."""
    return (
        f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{ZERO_SUM_INTRO}<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\nCurrent Observation: {observation}\n{BOXED_INSTRUCTION}"
        "<|eot_id|>\n<|start_header_id|>assistant<|end_header_id|>"
    )


TEMPLATES: dict[str, Template] = {
    "default": default_template,
    "move": move_template,
    "task": task_template,
    "qwen3-zs": qwen3_zs,
    "qwen3-sp": qwen3_sp,
    "qwen3-reasoning": qwen3_reasoning,
    "gemma3-zs": gemma3_zs,
    "llama-instruct-zs": llama_instruct_zs,
}


def get_template(name: str, templates: Mapping[str, Template] | None = None) -> Template:
    """The template called `name` in `templates` (default: those registered: the built-in TEMPLATES and
    every plugin's `register_templates`)."""
    if templates is None:
        from unstable_core.plugins import get_registry

        registry = get_registry()
        if name in registry.names("template"):
            return registry.load("template", name)
        known = registry.names("template")
    elif name in templates:
        return templates[name]
    else:
        known = sorted(templates)
    raise UnstableError(
        f"unknown prompt template {name!r}; use one of: {', '.join(known)} (or install the plugin that "
        "provides it)"
    )


def render_prompt(
    template_name: str, observation: str, tokenizer: Any, templates: Mapping[str, Template] | None = None
) -> tuple[str, list[int]]:
    """The prompt for `observation` as (text, token ids), with `tokenizer.decode(ids) == text`.

    The ids are tokenized without added special tokens (chat templates carry their own). The returned
    text is the decoding of those ids, so that the text recorded for a step is exactly what the model saw.
    A fast tokenizer's lines are tokenised once and remembered (`prompt_tokens.PromptEncoder`: the same
    ids, checked against the whole encoding), and a chat template's frame around the observation is
    rendered once per tokenizer (`prompt_tokens.template_frame`).
    """
    return prompt_renderer(template_name, tokenizer, templates)(observation)


PromptRenderer = Callable[[str], tuple[str, list[int]]]


def prompt_renderer(
    template_name: str, tokenizer: Any, templates: Mapping[str, Template] | None = None
) -> PromptRenderer:
    """`render_prompt` for one template and tokenizer, as a function of the observation alone.

    The template, its frame and the tokenizer's encoder are looked up once, not on every turn (a game
    renders all of a seat's turns with one renderer; the lookups cost as much as a prompt's encoding).
    """
    return _renderer(get_template(template_name, templates), tokenizer)


@attrs.frozen
class AnswerPrompt:
    """A template resolved once for one tokenizer, as what scores a model's answers needs: the prompt of an
    observation (`render`) and the text it ends with that belongs to the answer (`prefix`, `move`: `[`)."""

    render: PromptRenderer
    prefix: str


def answer_prompt(
    template_name: str, tokenizer: Any, templates: Mapping[str, Template] | None = None
) -> AnswerPrompt:
    """The template `template_name` for `tokenizer`: its renderer and its answer prefix."""
    template = get_template(template_name, templates)
    prefix = answer_prefix(template)
    return AnswerPrompt(_renderer(template, tokenizer), prefix)


def _renderer(template: Template, tokenizer: Any) -> PromptRenderer:
    """The renderer of a resolved template: its frame and the tokenizer's encoder looked up now."""
    text = _prompt_text(template, template_frame(template, tokenizer), tokenizer)
    encoder = prompt_encoder(tokenizer)
    encode = encoder.encode if encoder is not None else _whole_encoder(tokenizer)
    return lambda observation: encode(text(observation))


def _prompt_text(template: Template, frame: tuple[str, str] | None, tokenizer: Any) -> Callable[[str], str]:
    """The prompt text of an observation: inside the template's cached frame, else rendered in full."""
    if frame is None:
        return lambda observation: template(observation, tokenizer)
    head, tail = frame
    return lambda observation: head + observation + tail


def _whole_encoder(tokenizer: Any) -> PromptRenderer:
    """(decode(ids), ids) of a whole text, for a tokenizer without a PromptEncoder."""

    def encode(text: str) -> tuple[str, list[int]]:
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        return tokenizer.decode(ids), ids

    return encode
