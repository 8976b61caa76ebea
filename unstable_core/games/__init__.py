"""Playing one game: prompt templates, action extraction and the async game loop.

`play_game` and `InferenceUnavailable` are loaded on first use, so that importing the templates (which
plugin listing does) stays light.
"""

from __future__ import annotations

from typing import Any

from unstable_core.games.actions import extract_action
from unstable_core.games.templates import TEMPLATES, render_prompt

__all__ = ["TEMPLATES", "InferenceUnavailable", "extract_action", "play_game", "render_prompt"]

_LAZY = {"play_game", "InferenceUnavailable"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from unstable_core.games import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'unstable_core.games' has no attribute {name!r}")
