"""The log-prob contract measured on a real backend: what it records for a sampled token against what the
learner recomputes for it, for the base model and for an adapter the learner saved, at a temperature and
top-p, on prompts of different lengths in one batch. The vLLM tests and `benchmarks/gpu_smoke.py` use it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

# prompts of about 40, 1 and 5 tokens: rows of very different lengths in one batch
PARITY_TEXTS = ("hello there my good friend, how are you today? " * 3, "hi", "one two three four five")


@attrs.frozen
class Parity:
    """Largest |recorded - recomputed| log-prob (nats) over every sampled token, and the token count."""

    temperature: float
    top_p: float
    base_gap: float
    adapter_gap: float
    adapter_vs_base: float  # how far the adapter moved the tokens' log-probs: > 0 means it was served
    tokens: int

    def row(self) -> str:
        return (
            f"T {self.temperature:g}, top_p {self.top_p:g}: base {self.base_gap:.2g}, adapter "
            f"{self.adapter_gap:.2g} nats ({self.tokens} tokens; the adapter moves them {self.adapter_vs_base:.2g})"
        )


def parity_learner(
    model: str, run_dir: str | Path, temperature: float, top_p: float, device: str = "cpu"
) -> Any:
    """A REINFORCE learner of `model` (LoRA rank 8) that recomputes log-probs at `temperature` and `top_p`."""
    from unstable_core import plugins

    learner = plugins.load("learner", "reinforce").create(
        model,
        device=device,
        run_dir=run_dir,
        temperature=temperature,
        top_p=top_p,
        lora_config={"lora_rank": 8, "lora_alpha": 16},
        seed=0,
    )
    learner.initialize_algorithm()
    return learner


def save_perturbed_adapter(learner: Any, seed: int, scale: float = 0.5) -> str:
    """Give the learner's LoRA random non-zero B weights (so the adapter moves the outputs) and save a
    checkpoint: the adapter folder a run hands the inference actors."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen).to(param) * scale)
    learner.step += 1
    return str(learner.save_checkpoint())


def recorded_and_recomputed(
    backend: Any, learner: Any, prompts: Sequence[Sequence[int]], params: Any, adapter: str | None = None
) -> tuple[Any, Any, Any]:
    """The backend's recorded log-probs of one batch, the learner's recomputation of the same tokens, and
    its base model's (adapter disabled): three [N] tensors on the CPU."""
    import torch

    from unstable_core.inference.base import GenerationRequest
    from unstable_core.testing import sampled_steps_from

    outs = backend.generate_batch(
        [GenerationRequest(tuple(p), lora_path=adapter, params=params) for p in prompts]
    )
    errors = [o.error for o in outs if o.error]
    if errors:
        raise AssertionError(f"the backend failed: {errors[0]}")
    tokens = learner.collate(sampled_steps_from(prompts, outs))
    mask = tokens.behaviour_mask
    with torch.no_grad():
        policy = learner.policy_logprobs(tokens)[mask]
        with learner.model.disable_adapter():
            base = learner.policy_logprobs(tokens)[mask]
    return tokens.behaviour_logprobs[mask].cpu(), policy.float().cpu(), base.float().cpu()


def measure_parity(
    backend: Any,
    model: str,
    run_dir: str | Path,
    temperature: float,
    top_p: float,
    max_tokens: int = 12,
    device: str = "cpu",
    adapter_scale: float = 0.5,
) -> Parity:
    """Sample the parity prompts from `backend`, with the base model and then with an adapter a fresh
    learner saved (LoRA B weights of std `adapter_scale`), and compare what it recorded with that learner's
    recomputation."""
    from unstable_core.inference.base import SamplingParams

    learner = parity_learner(model, run_dir, temperature, top_p, device)
    prompts = [backend.tokenizer.encode(t) for t in PARITY_TEXTS]
    params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=7)
    recorded, base, _ = recorded_and_recomputed(backend, learner, prompts, params)
    base_gap = float((recorded - base).abs().max())
    adapter = save_perturbed_adapter(learner, seed=1, scale=adapter_scale)
    recorded, adapted, unadapted = recorded_and_recomputed(backend, learner, prompts, params, adapter)
    return Parity(
        temperature,
        top_p,
        base_gap,
        float((recorded - adapted).abs().max()),
        float((adapted - unadapted).abs().max()),
        int(recorded.numel()),
    )
