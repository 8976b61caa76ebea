"""The inference Ray actor: one backend (transformers, vLLM, or a plugin's) serving many games at once.

It is an async actor with a high `max_concurrency`, so the requests of hundreds of concurrent games
reach the backend together and are coalesced into batches there. Given the run's adapter store, it serves
each request's adapter from a copy on its own node (`inference/adapter_cache.py`), never from the run
directory, so that a cluster needs no shared filesystem.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.inference.base import GenerationOutput, GenerationRequest

MAX_CONCURRENCY = 1024
RESOURCES_ENV = "UNSTABLE_INFERENCE_RESOURCES"  # JSON: Ray resources each inference actor asks for
SPARE_ADAPTERS = 4  # adapter copies kept on disk beyond the backend's max_loras


class InferenceActor:
    """Builds the backend registered as `backend_name` and serves its `generate`."""

    def __init__(
        self,
        backend_name: str,
        backend_kwargs: Mapping[str, Any],
        torch_threads: int | None = None,
        adapter_store: str | None = None,
    ) -> None:
        """`adapter_store`: the actor name of the run's AdapterStore, which sends adapters as bytes, copied
        to `<temp dir>/unstable-adapters` on this node (None: the backend reads each request's folder)."""
        from unstable_core import plugins
        from unstable_core.inference.adapter_cache import AdapterCache, record_opens

        record_opens()
        if torch_threads:  # Ray starts workers with OMP_NUM_THREADS=1: one core for a CPU model otherwise
            import torch

            torch.set_num_threads(torch_threads)

        self.backend_name = backend_name
        self.backend_kwargs = dict(backend_kwargs)
        self.backend = plugins.load("backend", backend_name)(**self.backend_kwargs)
        self.adapters = None
        if adapter_store is not None:

            async def fetch(path: str) -> Any:
                import ray

                got = await ray.get_actor(adapter_store).adapter.remote(path)
                return got if isinstance(got, str) else await got  # the ObjectRef of the files

            capacity = getattr(self.backend, "max_loras", 8) + SPARE_ADAPTERS
            self.adapters = AdapterCache(fetch, capacity)

    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        """Complete one request (batched with the concurrent ones)."""
        out = await self._generate(request)
        self._exit_if_dead()
        return out

    async def _generate(self, request: GenerationRequest) -> GenerationOutput:
        """The backend's output for `request`, its adapter served from this node's cache."""
        if self.adapters is None or request.lora_path is None:
            return await self.backend.generate(request)
        import attrs

        from unstable_core.inference.adapter_cache import AdapterUnavailable

        try:
            async with self.adapters.use(request.lora_path) as local:
                return await self.backend.generate(attrs.evolve(request, lora_path=local))
        except AdapterUnavailable as exc:
            return GenerationOutput.failure(str(exc))

    async def generate_many(self, requests: list[GenerationRequest]) -> list[GenerationOutput | Exception]:
        """Complete many requests of one collector in one Ray call (batched with the concurrent ones); a
        request whose `generate` raised gets its exception in its place."""
        import asyncio

        outs = await asyncio.gather(*(self._generate(r) for r in requests), return_exceptions=True)
        self._exit_if_dead()
        return list(outs)

    def _exit_if_dead(self) -> None:
        """A backend whose engine died (`backend.dead`, e.g. vLLM's) cannot serve again: end this process,
        so that Ray restarts the actor with a new engine and the collectors replay its games there."""
        dead = getattr(self.backend, "dead", None)
        if dead:
            import os
            import sys

            print(f"inference actor {os.getpid()}: {dead}", file=sys.stderr, flush=True)
            os._exit(1)

    async def stats(self) -> dict[str, float]:
        """The backend's queue and throughput figures."""
        return self.backend.stats()

    async def ping(self) -> str:
        """'pong' once the backend is loaded: a liveness check."""
        return "pong"

    async def devices(self) -> dict[str, Any]:
        """The GPUs Ray gave this actor and the device its backend uses (see `devices.placed_on`)."""
        from unstable_core.runtime.actors.devices import placed_on

        return placed_on(getattr(self.backend, "device", None))

    async def pid(self) -> int:
        """The actor's process id: a new one after Ray restarted it (the run reports restarts)."""
        import os

        return os.getpid()

    async def tokenizer_name(self) -> str:
        """What to pass to `inference.chat_prompt.tokenizer_for` to get this model's tokenizer."""
        return str(self.backend_kwargs["model"])

    async def close_adapters(self) -> None:
        """Remove this node's copies of adapters (at the end of a run: Ray ends the process without
        running its exit handlers; the next inference actor on the node would remove them otherwise)."""
        if self.adapters is not None:
            self.adapters.close()


def create_inference_actor(
    backend_name: str,
    backend_kwargs: Mapping[str, Any],
    *,
    num_gpus: float = 0,
    num_cpus: float = 1,
    max_restarts: int = -1,
    name: str | None = None,
    torch_threads: int | None = None,
    adapter_store: str | None = None,
    resources: Mapping[str, float] | None = None,
) -> Any:
    """Start an InferenceActor on Ray (which must be initialised); an actor handle.

    `torch_threads` sets the backend's CPU threads (Ray's default for a worker is one); `adapter_store`
    (the actor name of the run's AdapterStore) sends it adapters as bytes; `resources`: Ray custom resources it asks for
    (a node that offers them is where it runs).
    The actor restarts after a crash (`max_restarts`, -1 = always); calls in flight when it died fail
    with a Ray error for the caller to retry.
    """
    import ray

    from unstable_core import plugins

    if not ray.is_initialized():
        raise UnstableError("Ray is not initialised; call ray.init() before create_inference_actor")
    if not isinstance(backend_kwargs, Mapping) or "model" not in backend_kwargs:
        raise UnstableError(
            "backend_kwargs must be a mapping with at least 'model' (a model alias, hub id or folder)"
        )
    plugins.get_registry().get("backend", backend_name)  # an unknown name fails here, listing the known ones
    options: dict[str, Any] = {
        "num_gpus": num_gpus,
        "num_cpus": num_cpus,
        "max_restarts": max_restarts,
        "max_concurrency": MAX_CONCURRENCY,
    }
    if name is not None:
        options["name"] = name
    if resources:
        options["resources"] = dict(resources)
    return (
        ray.remote(InferenceActor)
        .options(**options)
        .remote(backend_name, dict(backend_kwargs), torch_threads, adapter_store)
    )


def inference_resources() -> dict[str, float]:
    """The Ray custom resources every inference actor of a run asks for: UNSTABLE_INFERENCE_RESOURCES, a
    JSON object such as '{"inference_node": 1}' (none when unset)."""
    text = os.environ.get(RESOURCES_ENV, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError("not an object")
        return {str(k): float(v) for k, v in value.items()}
    except (ValueError, TypeError) as exc:
        raise UnstableError(
            f"{RESOURCES_ENV} must be a JSON object of Ray resources, e.g. '{{\"inference_node\": 1}}'; "
            f"got {text!r} ({exc})"
        ) from None


def create_engines(
    specs: Mapping[str, Any],
    *,
    gpu: float,
    threads: int,
    main_actors: int = 1,
    adapter_store: str | None = None,
) -> dict[str, list[Any]]:
    """One pool of inference actors per engine name (`main`: `main_actors` of them, others one each), each
    served by its `EngineSpec` (`launch.engines`); API models take no GPU, no threads and no adapters
    (`adapter_store`: the name of the actor that sends the others theirs). Each asks for
    `inference_resources()`."""
    resources = inference_resources()
    engines: dict[str, list[Any]] = {}
    for key, spec in specs.items():
        engines[key] = [
            create_inference_actor(
                spec.backend,
                spec.kwargs,
                num_gpus=0 if spec.remote else gpu,
                torch_threads=None if gpu or spec.remote else threads,
                adapter_store=None if spec.remote else adapter_store,
                resources=resources,
            )
            for _ in range(main_actors if key == "main" else 1)
        ]
    return engines
