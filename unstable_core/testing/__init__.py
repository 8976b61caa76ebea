"""Helpers for tests and benchmarks: a tiny random-weight causal LM with the embedded default's tokenizer,
and on-policy steps sampled from a model by the real backend.

The model is real (a `LlamaForCausalLM` loaded by `from_pretrained` like any other), only small and
untrained, so tests exercise the real loading, generation and training code in seconds.

The learning check every learner must pass (`check_learner_learns`, see `unstable_core.testing.learning_check`)
is importable from here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from unstable_core.testing.learning_check import (  # noqa: F401  (re-exported: the learning check)
    GOAL,
    START_MAX,
    LearningResult,
    check_learner_learns,
    run_default_transforms,
    sign_flipped,
)
from unstable_core.testing.local_ray import local_ray  # noqa: F401  (re-exported)
from unstable_core.testing.tiny_model import (  # noqa: F401  (re-exported)
    make_tiny_adapter,
    make_tiny_model,
    session_tiny_model,
    tiny_llama,
)
from unstable_core.types import Step

PROMPTS = ("play a move", "hello there", "one two three", "x o x")

_TOKENIZER_CACHE: dict[str, str] = {}


def sampled_steps(
    model_path: str,
    temperature: float,
    prompts: Sequence[str] = PROMPTS,
    dtype: Any = None,
    seed: int = 0,
    backend: Any = None,
) -> list[Step]:
    """Steps whose completions (up to 6 tokens) and behaviour log-probs come from the real transformers
    backend (or the `backend` given) sampling `prompts` at `temperature`: on-policy data for a learner of
    the same model."""
    from unstable_core.inference.base import GenerationRequest, SamplingParams
    from unstable_core.inference.hf.backend import TransformersBackend

    backend = backend or TransformersBackend(model_path, device="cpu", dtype=dtype)
    ids = [tuple(backend.tokenizer.encode(t)) for t in prompts]
    params = SamplingParams(temperature=temperature, max_tokens=6, seed=seed)
    outs = backend.generate_batch([GenerationRequest(p, params=params) for p in ids])
    return sampled_steps_from(ids, outs)


def sampled_steps_from(prompts: Sequence[Sequence[int]], outputs: Sequence[Any]) -> list[Step]:
    """One step per prompt's token ids and the backend's `GenerationOutput` for it (reward 1)."""
    return [
        Step(
            pid=0,
            env_id="test",
            obs="",
            act="",
            prompt_ids=list(p),
            completion_ids=list(o.token_ids),
            logprobs=list(o.logprobs),
            reward=1.0,
            game_idx=i,
        )
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]


def plain_logprobs(
    model: Any,
    prompt: Sequence[int],
    completion: Sequence[int],
    temperature: float = 1.0,
    adapter: str | None = None,
) -> list[float]:
    """log softmax(logits / T) of each completion token from one plain forward pass of `model` over prompt +
    completion (no KV cache, no batching): what a sampler's recorded log-probs must equal."""
    import torch

    ids = torch.tensor([list(prompt) + list(completion)])
    extra = {"adapter_names": [adapter]} if adapter else {}
    with torch.inference_mode():
        logprobs = torch.log_softmax(model(input_ids=ids, **extra).logits[0].float() / temperature, dim=-1)
    return [logprobs[len(prompt) - 1 + k, t].item() for k, t in enumerate(completion)]


# `unstable run` options for a run of seconds on the tiny model (2 learner steps of 4 steps, 8 tokens a turn)
TINY_RUN_ARGS = [
    "--learning-steps", "2", "--batch-size", "4", "--mini-batch-size", "2",
    "--max-generation-len", "8", "--num-train-workers", "4", "--device", "cpu",
    "--lora-config", '{"lora_rank": 4, "lora_alpha": 8}',
]  # fmt: skip
