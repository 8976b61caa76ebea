"""The rollout benchmark's backend alone, in this process: (a)'s tokens/s, the FLOP/s and decode-step
measures, the log-prob gap, and the machine's matmul baselines."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import attrs
from rollout_games import ENV_ID, TEMPERATURE

from unstable_core.inference.base import GenerationOutput, GenerationRequest, SamplingParams

MAX_MODEL_LEN = 4096  # of every backend here, as the engine's inference actor had it


def backend_kwargs(model: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A backend's constructor options, in the inference actor as alone: these defaults, then `options`."""
    kwargs = {"model": model, "max_batch_size": 32, "max_loras": 8, "max_model_len": MAX_MODEL_LEN}
    return {**kwargs, "device": None, **(options or {})}


def first_prompts(model: str, n: int, seed: int = 0) -> list[list[int]]:
    """The first-turn prompt ids of `n` TicTacToe games, as the game loop renders them."""
    import textarena

    from unstable_core.games.templates import render_prompt
    from unstable_core.model_loading import load_tokenizer

    tokenizer = load_tokenizer(model)
    prompts = []
    for i in range(n):
        env = textarena.make(ENV_ID)
        env.reset(num_players=2, seed=seed + i)
        _, observation = env.get_observation()
        prompts.append(render_prompt("default", observation, tokenizer)[1])
    return prompts


@attrs.frozen
class Unseeded:
    """A backend whose requests are sampled without their seed, as `unstable run` samples. vLLM's CPU build
    (0.32.0) kills its engine ("CPU Generator does not use offset") when a seeded request's prefill is
    split over engine steps, as a batch of 32 first prompts is (more than 2,048 prompt tokens a step)."""

    backend: Any

    @property
    def tokenizer(self) -> Any:
        return self.backend.tokenizer

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        unseeded = attrs.evolve(request, params=attrs.evolve(request.params, seed=None))
        return await self.backend.generate(unseeded)


@attrs.define
class BackendAlone:
    """(a) a backend alone, in this process: one batch of B first-turn game prompts at a time. The FLOP/s,
    decode-step and log-prob measures read a TransformersBackend's model."""

    backend: Any
    prompts: list[list[int]]
    max_tokens: int
    seeded: bool = True  # False: requests sampled without a seed (`Unseeded`), as a run samples them

    @classmethod
    def load(
        cls,
        model: str,
        batch: int,
        max_tokens: int,
        threads: int,
        backend: str = "transformers",
        options: dict[str, Any] | None = None,
        seeded: bool = True,
    ) -> BackendAlone:
        """Load the model on the backend registered as `backend`, built with `backend_kwargs(model,
        options)`, with `threads` torch threads (as the inference actor has); warm it up (a vLLM engine
        compiles on its first batch)."""
        import torch

        from unstable_core import plugins

        torch.set_num_threads(threads)
        loaded = plugins.load("backend", backend)(**backend_kwargs(model, options))
        alone = cls(loaded, first_prompts(model, batch), max_tokens, seeded)
        alone.tokens_per_s(seed=-1)
        return alone

    @property
    def parameters(self) -> int:
        """The model's parameter count (tied embeddings once: the LM head's matmul)."""
        return sum(p.numel() for p in self.backend._pool.base_model.parameters())

    @property
    def widths(self) -> tuple[int, int]:
        """(hidden size, MLP width) of the model: the matmul shape of most of its FLOPs."""
        config = self.backend._pool.base_model.config
        return int(config.hidden_size), int(getattr(config, "intermediate_size", 4 * config.hidden_size))

    def tokens_per_s(self, seed: int = 0, prompts: list[list[int]] | None = None) -> float:
        """Generated tokens per second of one batch: the B prompts, or `prompts`."""
        from backend_bench import measure_backend_throughput

        prompts = prompts or self.prompts
        n = len(prompts)
        return measure_backend_throughput(
            self.backend if self.seeded else Unseeded(self.backend),
            prompts,
            self.max_tokens,
            temperature=TEMPERATURE,
            seed=1000 + seed * n,
        )

    def step_matmul_flops(self, batch: int, repeats: int = 5) -> float:
        """fp32 FLOP/s of the model's own Linear layers (LM head included, packed as the backend packs
        them) applied in turn to `batch` rows, as one decode step applies them: every weight read from
        memory once a step, the best of `repeats` steps. What decode at this batch could reach if nothing
        but its matmuls took time."""
        import torch

        model = self.backend._pool.base_model
        layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
        rows = {m.in_features: torch.randn(batch, m.in_features, dtype=m.weight.dtype) for m in layers}
        best = float("inf")
        with torch.inference_mode():
            for _ in range(repeats + 1):  # the first is a warm-up
                started = time.perf_counter()
                for m in layers:
                    m(rows[m.in_features])
                best = min(best, time.perf_counter() - started)
        return 2.0 * batch * sum(m.weight.numel() for m in layers) / best

    def decode_step_s(self, rows: int, steps: int = 12) -> float:
        """Seconds of one decode step of `rows` rows, each a first-turn prompt's length of cached tokens
        (the backend's forward pass and fp32 logits, no sampling; no adapter): the median of `steps` steps."""
        import torch

        from unstable_core.inference.hf.kv_cache import in_place_cache

        backend, device = self.backend, self.backend.device
        sync = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
        length = len(self.prompts[0])
        cache = in_place_cache(backend._pool.base_model.config, length + steps + 1)
        attention = torch.ones((rows, length), dtype=torch.long, device=device)
        times = []
        with torch.inference_mode():
            prompt = torch.tensor([self.prompts[0]] * rows, device=device)
            positions = torch.arange(length, device=device).expand(rows, -1)
            backend._forward([], prompt, attention, positions, cache, False)  # [] rows: no adapter
            for i in range(steps):
                attention = torch.cat([attention, attention.new_ones((rows, 1))], dim=-1)
                position = torch.full((rows, 1), length + i, device=device)
                sync()
                started = time.perf_counter()
                backend._forward([], prompt[:, -1:], attention, position, cache, False)
                sync()
                times.append(time.perf_counter() - started)
        return statistics.median(times)

    def logprob_gap(self, model: str) -> float:
        """The largest |recorded - recomputed| log-prob over one batch's sampled tokens, recomputed by a
        plain fp32 forward pass of a freshly loaded model (torch's own kernels, as the learner runs)."""
        import torch

        from unstable_core.model_loading import load_causal_lm
        from unstable_core.testing import plain_logprobs

        params = SamplingParams(temperature=TEMPERATURE, max_tokens=self.max_tokens, seed=7)
        outs = self.backend.generate_batch([GenerationRequest(tuple(p), params=params) for p in self.prompts])
        plain = load_causal_lm(model, device="cpu", dtype=torch.float32)
        gap = 0.0
        for prompt, out in zip(self.prompts, outs, strict=True):
            recomputed = plain_logprobs(plain, prompt, out.token_ids, temperature=TEMPERATURE)
            gap = max([gap, *(abs(r - x) for r, x in zip(recomputed, out.logprobs, strict=True))])
        return gap

    def close(self) -> None:
        """Release the model."""
        asyncio.run(self.backend.close())


def matmul_flops(rows: int, inner: int, cols: int, kernel: str = "torch", seconds: float = 0.5) -> float:
    """fp32 FLOP/s of [rows, inner] x [inner, cols] in this process (its torch threads), the best of three
    timings of about `seconds / 3` each: `kernel` "torch" is torch.matmul, "onednn" oneDNN's linear on a
    weight packed once, as the backend's packed layers run it."""
    import torch

    from unstable_core.inference.hf.packed_linear import apply_packed, pack_weight

    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    if kernel == "onednn":
        packed = pack_weight(b.t().contiguous())
        multiply = lambda: apply_packed(a, packed)  # noqa: E731
    else:
        multiply = lambda: torch.matmul(a, b)  # noqa: E731
    multiply()
    started = time.perf_counter()
    multiply()
    reps = max(1, int(seconds / 3 / max(time.perf_counter() - started, 1e-6)))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(reps):
            multiply()
        best = min(best, (time.perf_counter() - started) / reps)
    return 2.0 * rows * inner * cols / best


def best_matmul_flops(rows: int, inner: int, cols: int) -> tuple[float, dict[str, float]]:
    """The machine's fp32 matmul at this shape: the faster kernel's FLOP/s, and each kernel's."""
    from unstable_core.inference.hf.packed_linear import packing_available

    kernels = ("torch", "onednn") if packing_available() else ("torch",)
    each = {k: matmul_flops(rows, inner, cols, kernel=k) for k in kernels}
    return max(each.values()), each
