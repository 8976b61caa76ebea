"""Prompts of text-only backends (HTTP APIs): a tokenizer whose ids are the UTF-8 bytes of the prompt and
whose chat template keeps the chat messages, so that an API is sent messages, not a rendered string.

A game seat renders its prompt with its engine's tokenizer (`games.templates.render_prompt`). For an API
model that tokenizer is `MessagesTokenizer`: a chat-style template (one that calls
`apply_chat_template`, like `default`) yields the messages as JSON, which `prompt_messages` turns back into
messages; a fixed-string template (`qwen3-zs`, ...) yields its text, sent verbatim as one user message.
The recorded prompt of such a step is exactly what was sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.model_loading import is_api_model, load_tokenizer

CHAT_KEY = "messages"


def tokenizer_for(name: str) -> Any:
    """The tokenizer prompts for `name` are rendered with: the model's own, or for an API model
    (`openai:MODEL`) the byte-level `MessagesTokenizer`, which keeps chat messages for the API."""
    return MessagesTokenizer(name) if is_api_model(name) else load_tokenizer(name)


class MessagesTokenizer:
    """The tokenizer of an API model: byte-level ids (no vocabulary of its own), chat messages as JSON."""

    eos_token = pad_token = ""
    eos_token_id = pad_token_id = None

    def __init__(self, name_or_path: str = "") -> None:
        self.name_or_path = name_or_path

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        """The messages as `{"messages": [...]}` JSON (an API always answers as the assistant, so
        `add_generation_prompt` changes nothing); their ids when `tokenize`."""
        clean = []
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
                raise UnstableError(f"a chat message needs a 'role' and a 'content', got {m!r}")
            clean.append({"role": m["role"], "content": str(m["content"])})
        text = json.dumps({CHAT_KEY: clean}, ensure_ascii=False)
        return self.encode(text) if tokenize else text

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """The UTF-8 bytes of `text`."""
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of byte ids made by `encode`."""
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def __len__(self) -> int:
        return 256


def chat_messages(text: str) -> list[dict[str, str]] | None:
    """The messages of a chat-style prompt rendered by `MessagesTokenizer`; None for any other text."""
    if not text.startswith('{"' + CHAT_KEY + '"'):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    messages = data.get(CHAT_KEY) if isinstance(data, dict) else None
    if not isinstance(messages, list) or not messages:
        return None
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]


def prompt_messages(text: str) -> list[dict[str, str]]:
    """The chat messages of a prompt rendered by `MessagesTokenizer`: the template's messages for a
    chat-style template, else the whole text as one user message."""
    return chat_messages(text) or [{"role": "user", "content": text}]
