"""A benchmark fake: an inference backend that answers at once with a random legal move.

It is a real `InferenceBackend` (batched by the base class's gather window, served by the real
InferenceActor), so timing games against it measures the engine's own overhead, not a model. It reads the
legal moves from the prompt ("Available Moves: '[0]', '[4]'" or "Valid moves: [e2e4], ...") and answers
"\\boxed{[4]}" as the model's token ids. Registered under BACKEND_NAME only by `register_instant_backend`,
never by the core: it exists for `benchmarks/rollout.py`.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.inference.base import GenerationOutput, GenerationRequest, InferenceBackend

BACKEND_NAME = "instant-bench"
_MOVES_LINE = re.compile(r"(?:available|valid) moves?\s*:(.*)", re.IGNORECASE)
_MOVE = re.compile(r"\[[^\[\]\n]+\]")
TAIL_TOKENS = 128  # prompt tokens decoded to find the moves line before decoding the whole prompt


def legal_moves(text: str) -> list[str]:
    """The bracketed moves of the last "Available Moves:" / "Valid moves:" line of `text` (empty if none)."""
    lines = _MOVES_LINE.findall(text)
    return _MOVE.findall(lines[-1]) if lines else []


def choose_move(text: str, rng: random.Random) -> str | None:
    """A uniformly random legal move listed in `text`, or None when it lists none."""
    moves = legal_moves(text)
    return rng.choice(moves) if moves else None


class InstantBackend(InferenceBackend):
    """Answers every prompt with "\\boxed{<random legal move>}" in the model's tokens, without a model.

    `latency_s` delays each answer (without holding up the batch), standing in for a model's time so that
    many games stay in flight at once; 0 answers at once.
    """

    def __init__(self, model: str, *, seed: int = 0, latency_s: float = 0.0, **kwargs: Any) -> None:
        from unstable_core.model_loading import load_tokenizer

        if not latency_s >= 0:
            raise UnstableError(f"latency_s must be >= 0 seconds, got {latency_s}; use 0 to answer at once")
        super().__init__(model, **kwargs)
        self.latency_s = float(latency_s)
        self._tokenizer = load_tokenizer(model)
        self._rng = random.Random(seed)
        self.eos_id = self._tokenizer.eos_token_id
        self._answers: dict[str, list[int]] = {}  # answer text -> its token ids, EOS included

    @property
    def tokenizer(self) -> Any:
        """The tokenizer of `model` (only the tokenizer is loaded)."""
        return self._tokenizer

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        """The base class's batched generate, after `latency_s` seconds."""
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return await super().generate(request)

    def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """One random legal move per request; a prompt listing no moves gets an "error" output."""
        return [self._answer(request) for request in requests]

    def _answer(self, request: GenerationRequest) -> GenerationOutput:
        # the moves line closes the prompt: decode its end (a model reads no text either), the whole if needed
        moves = legal_moves(self._tokenizer.decode(request.prompt_ids[-TAIL_TOKENS:]))
        if not moves and len(request.prompt_ids) > TAIL_TOKENS:
            moves = legal_moves(self._tokenizer.decode(request.prompt_ids))
        seed = request.params.seed
        if not moves:
            return GenerationOutput.failure(
                "the prompt lists no 'Available Moves'/'Valid moves'; the instant backend only plays such envs"
            )
        move = (random.Random(seed) if seed is not None else self._rng).choice(moves)
        text = f"\\boxed{{{move}}}"
        if text not in self._answers:
            self._answers[text] = [*self._tokenizer.encode(text, add_special_tokens=False), self.eos_id]
        token_ids = list(self._answers[text])
        # the policy is uniform over the legal moves: the first token carries the choice, the rest follow
        logprobs = [math.log(1.0 / len(moves))] + [0.0] * (len(token_ids) - 1)
        return GenerationOutput(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason="stop")

    def _release(self) -> None:
        """Nothing to free: there is no model."""


def register_instant_backend() -> None:
    """Register InstantBackend as backend BACKEND_NAME in this process's plugin registry (idempotent).

    Run it in the driver and, as Ray's `worker_process_setup_hook`, in every worker, so that
    `create_inference_actor(BACKEND_NAME, ...)` finds it inside the InferenceActor's own process.
    """
    from unstable_core import plugins
    from unstable_core.registry import Component

    registry = plugins.get_registry()
    if BACKEND_NAME not in registry.names("backend"):
        registry.add(
            Component(
                kind="backend",
                name=BACKEND_NAME,
                target=InstantBackend,
                description="benchmark fake: a random legal move at once",
                plugin="benchmarks.instant_backend",
            )
        )
