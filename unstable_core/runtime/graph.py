"""The typed set of a run's Ray actors, as `runtime.launch.build` starts them and the run watches and closes
them."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.define
class ActorGraph:
    """The Ray actors of one run: `buffer` and `learner` only where the plan learns."""

    recorder: Any
    league: Any
    engines: dict[str, list[Any]]  # engine name -> its inference actors
    collectors: list[Any] = attrs.field(factory=list)
    buffer: Any = None
    learner: Any = None  # rank 0 of the learner's workers
    learner_workers: list[Any] = attrs.field(factory=list)  # the other ranks of a data-parallel learner
    adapter_store: Any = None  # on the run directory's node: sends the inference actors their adapters
    probes: Any = None  # the scheduled evaluation's probes (--eval-probe), on the run directory's node

    def inference_actors(self) -> list[Any]:
        return [a for pool in self.engines.values() for a in pool]

    def close_adapter_caches(self, timeout_s: float = 10.0) -> None:
        """The inference actors remove their copies of adapters (a dead or busy one is not waited for)."""
        import ray

        refs = [a.close_adapters.remote() for a in self.inference_actors()]
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)

    def stateful(self) -> dict[str, Any]:
        """Name -> actor of those whose state a run cannot lose (Ray restarts only the inference actors)."""
        named = {f"the {k}": getattr(self, k) for k in ("recorder", "league", "buffer", "learner")}
        named.update({f"the collector-{i}": c for i, c in enumerate(self.collectors)})
        named.update(
            {f"the learner worker of rank {r}": w for r, w in enumerate(self.learner_workers, start=1)}
        )
        return {name: a for name, a in named.items() if a is not None}

    def names(self) -> dict[str, str]:
        """Actor id (hex) -> name as the run's messages give it ('the learner', 'the inference-main-0')."""
        names = {a._actor_id.hex(): name for name, a in self.stateful().items()}
        for engine, pool in self.engines.items():
            names.update({a._actor_id.hex(): f"the inference-{engine}-{i}" for i, a in enumerate(pool)})
        if self.adapter_store is not None:
            names[self.adapter_store._actor_id.hex()] = "the adapter store"
        if self.probes is not None:
            names[self.probes._actor_id.hex()] = "the probe actor"
        return names
