"""The settings of `openai:MODEL` players, which every command that plays API models takes (run, play,
eval), and where their server is when none is given."""

from __future__ import annotations

import os

#: the options of openai:MODEL players
API_FIELDS = (
    "base_url",
    "api_key_env",
    "api_concurrency",
    "api_timeout_s",
    "api_max_retries",
    "api_max_tokens",
)
DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENV = "OPENAI_BASE_URL"


def default_base_url() -> str:
    """$OPENAI_BASE_URL, else OpenAI's own endpoint."""
    return os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
