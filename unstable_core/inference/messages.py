"""The messages of inference: sampling parameters, a request (prompt token ids + adapter), an output."""

from __future__ import annotations

from typing import Any

import attrs

from unstable_core.errors import UnstableError

FINISH_REASONS = ("stop", "length", "error")


@attrs.frozen
class SamplingParams:
    """How to sample one completion; temperature 0 is greedy decoding. `stop`: strings that end the
    completion at the token that holds one (kept, as EOS is; `inference.stops`)."""

    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise UnstableError(
                f"temperature must be >= 0, got {self.temperature}; use 0 for greedy decoding"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise UnstableError(
                f"top_p must be in (0, 1], got {self.top_p}; use 1.0 to disable nucleus sampling"
            )
        if self.max_tokens < 1:
            raise UnstableError(f"max_tokens must be >= 1, got {self.max_tokens}")


def _to_token_tuple(ids: Any) -> tuple[int, ...]:
    return tuple(map(int, ids))  # map: a few times faster than a generator, for prompts of every turn


def _to_path(path: Any) -> str | None:
    return None if path is None else str(path)


@attrs.frozen
class GenerationRequest:
    """One prompt, as the exact token ids the learner will later train on, and the adapter to use."""

    prompt_ids: tuple[int, ...] = attrs.field(converter=_to_token_tuple)
    lora_path: str | None = attrs.field(default=None, converter=_to_path)
    params: SamplingParams = SamplingParams()


@attrs.define
class GenerationOutput:
    """A completion: its text, the sampled token ids, and each token's log-probability under the policy.

    `token_ids` end with the EOS token when `finish_reason` is "stop"; `logprobs[i]` is the log-prob of
    token_ids[i] under the distribution it was sampled from (temperature, then the top-p nucleus,
    renormalised: `sampling.sampling_logprobs`), the quantity the learner recomputes.
    `completion_tokens` is the server's own count where the backend has no token ids (an API's `usage`),
    else None: reports of tokens per turn read it instead of `len(token_ids)`.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "error"
    error: str | None = None
    completion_tokens: int | None = None

    @classmethod
    def failure(cls, message: str) -> GenerationOutput:
        """The output of a request that could not be served, with the reason."""
        return cls(text="", token_ids=[], logprobs=[], finish_reason="error", error=message)


def token_budget(request: GenerationRequest, max_model_len: int) -> tuple[int, str | None]:
    """How many new tokens `request` may get within `max_model_len`, or (0, why it cannot run)."""
    n = len(request.prompt_ids)
    if n == 0:
        return 0, "empty prompt: a request needs at least one prompt token"
    if n >= max_model_len:
        return 0, (
            f"prompt of {n} tokens leaves no room to generate within max_model_len={max_model_len}; "
            "shorten the prompt or raise max_model_len"
        )
    return min(request.params.max_tokens, max_model_len - n), None
