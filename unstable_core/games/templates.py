"""Prompt templates: (observation, tokenizer) -> prompt text. (Placeholder: filled in by the games work.)"""

TEMPLATES: dict = {}
