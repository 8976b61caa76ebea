"""Action extraction: the model's final answer is the content of its last \\boxed{...}."""

from __future__ import annotations

import re

BOXED = "\\boxed{"
BRACKETED = re.compile(r"\s*\[[^\[\]\n]*[^\[\]\s][^\[\]\n]*\]")  # `[4]`, `[bet]`: closed, not blank


def _boxed_content(text: str, start: int) -> str | None:
    """The content of the \\boxed{ opened at `start`, up to its matching brace; None if it never closes."""
    depth = 1
    i = start + len(BOXED)
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last closed \\boxed{...} in `text` (nested braces allowed), or None."""
    start = text.rfind(BOXED)
    while start != -1:
        content = _boxed_content(text, start)
        if content is not None:
            return content
        start = text.rfind(BOXED, 0, start)
    return None


def extract_action(text: str, bracketed: bool = False) -> tuple[str, bool]:
    """(action, format_ok) from a completion.

    With a non-empty last \\boxed{...}: its stripped content, put in [brackets] unless it already has
    square brackets (TextArena's action syntax); format_ok is True. Otherwise the stripped completion
    itself is the action (the env will usually call it invalid) and format_ok is False.
    `bracketed` (an answer opened with `[` by the `move` template): the answer's first `[...]`, closed and
    non-empty, is the action and format_ok is True; anything after it is left out.
    """
    if bracketed:
        move = BRACKETED.match(text)
        return (move.group(0).strip(), True) if move else (text.strip(), False)
    content = last_boxed(text)
    if content is None or not content.strip():
        return text.strip(), False
    action = content.strip()
    if "[" not in action and "]" not in action:
        action = f"[{action}]"
    return action, True
