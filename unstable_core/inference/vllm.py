"""The vLLM backend: vLLM's async engine behind the same interface as the transformers backend.

vLLM batches continuously inside its engine, so gathered batches are handed over without waiting for
the previous one (`overlap_batches`). The engine lives on its own event loop in a daemon thread, so
`generate` works from any event loop and `generate_batch` from plain code. LoRA adapters become
`LoRARequest`s with a stable integer id per adapter folder (a rewritten folder gets a new id).
vLLM is imported only in the constructor: this module imports without it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import os
import threading
from collections.abc import Coroutine, Mapping
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.inference.adapters import AdapterLRU, AdapterSlot, adapter_problem, adapter_version
from unstable_core.inference.base import (
    GenerationOutput,
    GenerationRequest,
    InferenceBackend,
    SamplingParams,
    token_budget,
)
from unstable_core.models import load_tokenizer, resolve_model

VLLM_MISSING = "the vllm backend needs vLLM: pip install vllm (Linux with a CUDA GPU)"
VLLM_CONFIG_KEYS = (
    "model_name",
    "temperature",
    "max_tokens",
    "max_parallel_seq",
    "max_loras",
    "lora_config",
    "max_model_len",
)
LORA_CONFIG_KEYS = ("lora_rank", "lora_alpha", "lora_dropout", "target_modules")
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's LoRAConfig.max_lora_rank accepts only these


def vllm_max_lora_rank(lora_rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that loads adapters of `lora_rank` (rank 4 -> 8, 48 -> 64)."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= lora_rank:
            return allowed
    raise UnstableError(
        f"lora_rank {lora_rank} is above vLLM's largest max_lora_rank ({VLLM_LORA_RANKS[-1]}): lower it"
    )


@attrs.frozen
class VLLMApi:
    """The parts of vLLM the backend calls, in one place (a test can hand in fakes of the same shape)."""

    engine_args: Any  # vllm.AsyncEngineArgs
    engine: Any  # vllm.AsyncLLMEngine
    sampling_params: Any  # vllm.SamplingParams
    lora_request: Any  # vllm.lora.request.LoRARequest
    tokens_prompt: Any  # vllm.inputs.TokensPrompt

    @classmethod
    def load(cls) -> VLLMApi:
        """Import vLLM, or say how to install it."""
        try:
            import vllm
            from vllm.inputs import TokensPrompt
            from vllm.lora.request import LoRARequest
        except ImportError as exc:
            raise UnstableError(VLLM_MISSING) from exc
        return cls(vllm.AsyncEngineArgs, vllm.AsyncLLMEngine, vllm.SamplingParams, LoRARequest, TokensPrompt)


@attrs.frozen
class VLLMConfig:
    """UnstableBaselines v0.2's `vllm_config` mapped onto our names: backend options and default sampling."""

    backend_kwargs: dict[str, Any]
    sampling: SamplingParams


def map_vllm_config(cfg: Mapping[str, Any]) -> VLLMConfig:
    """Translate an UnstableBaselines v0.2 vllm_config (model_name, max_parallel_seq, lora_config, ...)."""
    unknown = sorted(set(cfg) - set(VLLM_CONFIG_KEYS))
    if unknown:
        raise UnstableError(f"unknown vllm_config keys {unknown}; allowed: {', '.join(VLLM_CONFIG_KEYS)}")
    if not cfg.get("model_name"):
        raise UnstableError("vllm_config needs model_name (a hub id or local model folder)")
    lora = dict(cfg.get("lora_config") or {})
    unknown = sorted(set(lora) - set(LORA_CONFIG_KEYS))
    if unknown:
        raise UnstableError(
            f"unknown vllm_config.lora_config keys {unknown}; allowed: {', '.join(LORA_CONFIG_KEYS)}"
        )
    max_model_len = int(cfg.get("max_model_len", 4096))
    kwargs = {
        "model": cfg["model_name"],
        "max_batch_size": int(cfg.get("max_parallel_seq", 128)),
        "max_loras": int(cfg.get("max_loras", 8)),
        "max_model_len": max_model_len,
        "max_lora_rank": vllm_max_lora_rank(int(lora.get("lora_rank", 32))),
    }
    max_tokens = cfg.get("max_tokens")  # None: as many as the context allows (clamped per request)
    sampling = SamplingParams(
        temperature=float(cfg.get("temperature", 0.6)),
        max_tokens=int(max_tokens) if max_tokens is not None else max_model_len,
    )
    return VLLMConfig(backend_kwargs=kwargs, sampling=sampling)


def _field_names(cls: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(inspect.signature(cls).parameters)


class _LoopThread:
    """An event loop running in a daemon thread; the engine and all its calls live on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-engine-loop", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine) -> Any:
        """Schedule `coro` on the loop; a concurrent.futures.Future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class VLLMBackend(InferenceBackend):
    """vLLM's AsyncLLMEngine with LoRA requests, for CUDA GPUs."""

    overlap_batches = True

    def __init__(
        self,
        model: str,
        *,
        max_batch_size: int = 128,
        gather_ms: float = 20.0,
        max_loras: int = 8,
        max_model_len: int = 4096,
        device: str | None = None,
        max_lora_rank: int = 32,
        gpu_memory_utilization: float = 0.9,
        max_cpu_loras: int | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        api: VLLMApi | None = None,
    ) -> None:
        super().__init__(
            model,
            max_batch_size=max_batch_size,
            gather_ms=gather_ms,
            max_loras=max_loras,
            max_model_len=max_model_len,
            device=device,
        )
        if device is not None and not device.startswith("cuda"):
            raise UnstableError(
                f"the vllm backend runs on CUDA GPUs, not {device!r}; use device='cuda' or the transformers backend"
            )
        self._api = api if api is not None else VLLMApi.load()
        self.default_params = SamplingParams()
        self.engine_kwargs = self._engine_kwargs(
            max_lora_rank, gpu_memory_utilization, max_cpu_loras, engine_kwargs or {}
        )
        self._adapters = AdapterLRU(self.engine_kwargs.get("max_cpu_loras") or 4 * self.max_loras)
        self._lora_ids = itertools.count(1)  # vLLM reserves 0
        self._request_ids = itertools.count()
        self._tokenizer: Any = None
        self._thread = _LoopThread()
        try:
            self._engine = self._thread.submit(self._start_engine()).result()
        except Exception:
            self._thread.stop()
            raise

    @classmethod
    def from_vllm_config(cls, cfg: Mapping[str, Any], **overrides: Any) -> VLLMBackend:
        """A backend from an UnstableBaselines v0.2 vllm_config; its temperature/max_tokens become `default_params`."""
        mapped = map_vllm_config(cfg)
        backend = cls(**{**mapped.backend_kwargs, **overrides})
        backend.default_params = mapped.sampling
        return backend

    def _engine_kwargs(
        self,
        max_lora_rank: int,
        gpu_memory_utilization: float,
        max_cpu_loras: int | None,
        extra: Mapping[str, Any],
    ) -> dict[str, Any]:
        resolved = resolve_model(self.model_name)
        model = os.path.join(resolved.path, resolved.gguf_file) if resolved.gguf_file else resolved.path
        kwargs: dict[str, Any] = {
            "model": model,
            "enable_lora": True,
            "max_loras": self.max_loras,
            "max_lora_rank": vllm_max_lora_rank(max_lora_rank),
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_batch_size,
            "gpu_memory_utilization": gpu_memory_utilization,
        }
        if max_cpu_loras is not None:
            kwargs["max_cpu_loras"] = max_cpu_loras
        if "logprobs_mode" in _field_names(self._api.engine_args):
            # log-probs of the distribution sampled from: after temperature and top-p, renormalised over the
            # nucleus, the definition of `inference.sampling.sampling_logprobs` that the learner recomputes
            # with the run's temperature and top_p (greedy: T = 1). Engines older than the option
            # (vllm-project/vllm#21398, July 2025) return raw T = 1 log-probs: off_policy/ metrics show that.
            kwargs["logprobs_mode"] = "processed_logprobs"
        kwargs.update(extra)
        return kwargs

    async def _start_engine(self) -> Any:
        return self._api.engine.from_engine_args(self._api.engine_args(**self.engine_kwargs))

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer of the model (loaded on first use)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.model_name)
        return self._tokenizer

    def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Complete `requests` on the engine (blocking); one output per request."""
        return self._thread.submit(self._generate_all(requests)).result()

    async def _run_batch(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        return await asyncio.wrap_future(self._thread.submit(self._generate_all(requests)))

    async def _generate_all(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        return list(await asyncio.gather(*(self._generate_one(r) for r in requests)))

    async def _generate_one(self, request: GenerationRequest) -> GenerationOutput:
        budget, problem = token_budget(request, self.max_model_len)
        if problem is not None:
            return GenerationOutput.failure(problem)
        lora = None
        if request.lora_path is not None:
            problem = adapter_problem(request.lora_path)
            if problem is not None:
                return GenerationOutput.failure(problem)
            lora = await self._lora_request(request.lora_path)
        p = request.params
        params = self._api.sampling_params(
            temperature=p.temperature, top_p=p.top_p, max_tokens=budget, seed=p.seed, logprobs=0
        )
        prompt = self._api.tokens_prompt(prompt_token_ids=list(request.prompt_ids))
        final = None
        try:
            async for out in self._engine.generate(
                prompt, params, f"unstable-{next(self._request_ids)}", lora_request=lora
            ):
                final = out
        except Exception as exc:  # one failing request must not fail the others
            return GenerationOutput.failure(f"vLLM failed this request: {type(exc).__name__}: {exc}")
        if final is None or not final.outputs:
            return GenerationOutput.failure("vLLM returned no output for this request")
        return _to_output(final.outputs[0])

    async def _lora_request(self, path: str) -> Any:
        version = adapter_version(path)
        slot = self._adapters.touch(path)
        if slot is None or slot.version != version:
            if slot is not None:  # the folder was rewritten: vLLM must load it afresh, under a new id
                self._adapters.remove(path)
                await self._engine.remove_lora(slot.handle)
            slot = AdapterSlot(handle=next(self._lora_ids), version=version)
            self._adapters.insert(path, slot)
            for _, old in self._adapters.overflow(keep=(path,)):
                await self._engine.remove_lora(old.handle)
        return self._api.lora_request(
            lora_name=f"adapter_{slot.handle}", lora_int_id=slot.handle, lora_path=path
        )

    def _release(self) -> None:
        shutdown = getattr(self._engine, "shutdown", None)
        if shutdown is not None:
            shutdown()
        self._thread.stop()


def _to_output(completion: Any) -> GenerationOutput:
    """Our output from a vLLM CompletionOutput (token ids, text, per-token logprob dicts, finish reason)."""
    token_ids = list(completion.token_ids)
    steps = completion.logprobs or []
    if len(steps) != len(token_ids):
        return GenerationOutput.failure(f"vLLM returned {len(steps)} logprobs for {len(token_ids)} tokens")
    logprobs = [float(step[token].logprob) for token, step in zip(token_ids, steps, strict=True)]
    reason = completion.finish_reason
    if reason not in ("stop", "length"):
        return GenerationOutput.failure(f"vLLM finished this request with reason {reason!r}")
    return GenerationOutput(
        text=completion.text, token_ids=token_ids, logprobs=logprobs, finish_reason=reason
    )
