"""Data parallelism for any learner: N processes in one torch.distributed group (gloo on CPU, NCCL on GPU)
share each optimizer step's micro-batches, and the trainable parameters' gradients are summed over the group
with one all_reduce, so that every process steps the same optimizer on the gradient one process would have
had. Each micro-batch keeps the scale `len(micro) / n` of the whole step, so the sum over ranks IS the
single-process gradient; what runs on the whole batch before the step (A2C's values and per-env z-scores,
PPO's pi_old pass) runs on every rank alike, so it equals one worker's by construction.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import attrs

from unstable_core.fault_points import pause_point

T = TypeVar("T")

#: how long a worker waits for the others at a collective (an update on a large model can take minutes)
COLLECTIVE_TIMEOUT_S = 1800


class CollectiveFailed(RuntimeError):
    """A collective of the learner group failed: another rank died, or left the group after an error of its
    own (which, not this, is why the run stops)."""


@contextlib.contextmanager
def collective(what: str) -> Iterator[None]:
    """Where this rank meets the others: a failure there (gloo's "Connection closed by peer", NCCL's
    errors: RuntimeError and torch's DistError) is a CollectiveFailed, told apart from a rank's own error."""
    try:
        yield
    except CollectiveFailed:
        raise
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CollectiveFailed(
            f"the learner group's {what} failed (another worker died or left the group): {first}"
        ) from exc


def free_address() -> tuple[str, int]:
    """This node's IP address and a free TCP port: where rank 0 hosts the group's rendezvous."""
    import ray

    host = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return host, int(s.getsockname()[1])


def default_backend(device: Any) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if str(device).startswith("cuda") else "gloo"


@attrs.define
class DataParallel:
    """This process's place in the learner's process group: rank `rank` of `world_size`."""

    rank: int
    world_size: int

    @classmethod
    def join(cls, rank: int, world_size: int, address: str, port: int, backend: str) -> DataParallel:
        """Join (create, for rank 0) the default process group at `address:port`; blocks until all joined."""
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(
                backend,
                init_method=f"tcp://{address}:{port}",
                rank=rank,
                world_size=world_size,
                timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
            )
        return cls(rank, world_size)

    def share(self, micro_batches: Sequence[T]) -> list[T]:
        """This rank's micro-batches: every world_size-th, from its rank on (balanced within one)."""
        return list(micro_batches[self.rank :: self.world_size])

    def sum_gradients(self, gradients: GradientSum) -> None:
        """Sum each rank's gradient total over the group, in place: one all_reduce of one flat buffer."""
        import torch.distributed as dist

        with collective("all_reduce"):
            dist.all_reduce(gradients.total, op=dist.ReduceOp.SUM)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` (picklable), in rank order."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        with collective("all_gather"):
            dist.all_gather_object(out, obj)
        return out

    def sum_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Key-wise sums of every rank's metrics (each rank's are its micro-batches' scaled shares)."""
        total: dict[str, float] = {}
        for part in self.gather(metrics):
            for key, value in part.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def merge_stats(self, stats: Any) -> Any:
        """Every rank's attrs statistics of sums merged into one: fields named `*max*` by max, others by sum."""
        parts = self.gather(stats)
        merged = parts[0]
        for other in parts[1:]:
            merged = merge_sums(merged, other)
        return merged

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        import torch.distributed as dist

        box = [obj if self.rank == 0 else None]
        with collective("broadcast"):
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def abort(self) -> None:
        """Leave the group from the middle of anything: the other ranks' pending and next collectives fail
        at once (gloo: "Connection closed by peer") instead of waiting COLLECTIVE_TIMEOUT_S for a call of
        this rank that will not come."""
        leave()

    def broadcast_parameters(self, params: Sequence[Any]) -> None:
        """Copy rank 0's values of `params` to every rank (in place)."""
        import torch.distributed as dist

        with collective("broadcast"):
            for p in params:
                dist.broadcast(p.data, src=0)


@attrs.frozen
class LearnerGroup:
    """The one way to start a data-parallel learner: where its `world_size` ranks meet (rank 0's node hosts
    the rendezvous) and how each rank joins. The run's learner actors, the learning check, the exactness
    check and the benchmark all start their groups with it; a group of one is no group (nothing joins)."""

    world_size: int
    address: str = "127.0.0.1"
    port: int = 0
    backend: str = "gloo"

    @classmethod
    def here(cls, world_size: int, backend: str = "gloo") -> LearnerGroup:
        """A group whose rendezvous is this node, on a free port."""
        address, port = free_address() if world_size > 1 else ("127.0.0.1", 0)
        return cls(world_size, address, port, backend)

    def join(self, learner: Any, rank: int) -> Any:
        """`learner` joins as rank `rank` (blocking until every rank has, then taking rank 0's parameters,
        optimizer state and step); returns it."""
        if self.world_size > 1:
            group = DataParallel.join(rank, self.world_size, self.address, self.port, self.backend)
            learner.join_data_parallel(group)
        return learner

    def run(self, learner: Any, rank: int, work: Callable[[Any], T]) -> T:
        """Rank `rank`'s part in a process of its own: join with `learner`, `work(learner)` (an update, a
        follower's loop), then leave the group whatever happened."""
        self.join(learner, rank)
        try:
            return work(learner)
        finally:
            leave()

    def spawn(self, target: Callable[..., None], *args: Any, ranks: Iterable[int] | None = None) -> list[Any]:
        """Start `target(group, rank, *args)` in a spawned process for each of `ranks` (default: every rank);
        `target` must be importable by its module and name."""
        import multiprocessing

        spawn = multiprocessing.get_context("spawn")
        ranks = range(self.world_size) if ranks is None else ranks
        processes = [spawn.Process(target=target, args=(self, rank, *args)) for rank in ranks]
        for process in processes:
            process.start()
        return processes


def wait_for(processes: Sequence[Any], timeout_s: float | None = None) -> list[int | None]:
    """Each process's exit code once it ended, waiting at most `timeout_s` for each; a process still running
    then is killed, and its code is None."""
    codes: list[int | None] = []
    try:
        for process in processes:
            process.join(timeout_s)
            codes.append(None if process.is_alive() else process.exitcode)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    return codes


class GradientSum:
    """The running sum of `params`' gradients over an optimizer step's micro-batches, in one flat float64
    buffer: float32 sums depend on their order, and N ranks add the micro-batches in another order than one
    process does (on a tiny model this alone moved parameters by 2e-6 relative after one Adam step)."""

    def __init__(self, params: Sequence[Any]) -> None:
        import torch

        self.params = list(params)
        numel = sum(p.numel() for p in self.params)
        device = self.params[0].device if self.params else "cpu"
        self.total = torch.zeros(numel, dtype=torch.float64, device=device)  # [sum of numels]

    def add(self) -> None:
        """Move the parameters' current gradients into the sum (and clear them)."""
        at = 0
        for p in self.params:
            if p.grad is not None:
                self.total[at : at + p.numel()] += p.grad.reshape(-1).double()
                p.grad = None
            at += p.numel()

    def write(self) -> None:
        """Set every parameter's gradient to its sum, in the parameter's dtype."""
        at = 0
        for p in self.params:
            p.grad = self.total[at : at + p.numel()].view_as(p).to(p.dtype)
            at += p.numel()


def merge_sums(a: Any, b: Any) -> Any:
    """Two attrs statistics of the same class added field by field; a field named `*max*` takes the max."""
    values = {}
    for field in attrs.fields(type(a)):
        x, y = getattr(a, field.name), getattr(b, field.name)
        values[field.name] = max(x, y) if "max" in field.name else x + y
    return type(a)(**values)


def lead(group: DataParallel | None, body: Callable[[], T]) -> T:
    """Rank 0's part of training: `body()`, then the other ranks' end. After a normal end they wait for
    their next batch, and a broadcast None ends them; after an error they may be waiting in any collective
    of an update, which no broadcast would match, so the group is aborted and their collectives fail."""
    if group is None:
        return body()
    try:
        result = body()
    except BaseException:
        group.abort()
        raise
    group.broadcast(None)
    return result


def follow(learner: Any) -> None:
    """A rank > 0's part of training: update on each batch rank 0 broadcasts, until it broadcasts None.
    After an error (its own, or a collective's) it aborts the group, so that no rank waits for it."""
    group = learner.data_parallel
    try:
        while (batch := group.broadcast(None)) is not None:
            pause_point(f"rank-{group.rank}-batch-{learner.step + 1}")
            learner.update(batch)
    except BaseException:
        group.abort()
        raise


def to_cpu(value: Any) -> Any:
    """`value` (nested dicts, lists, tuples) with every tensor moved to the CPU: what can be broadcast as an
    object between ranks of any device."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def leave() -> None:
    """Leave the process group, if this process joined one."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
