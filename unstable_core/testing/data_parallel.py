"""The data-parallel exactness check: one update of a learner by N processes of one torch.distributed group
against the same update by one process, on the same batch and seed; the trainable parameters must agree.

Used by the CI test (gloo on CPU) and by `benchmarks/gpu_smoke.py` (NCCL on GPUs).
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import attrs

from unstable_core.learners.data_parallel import LearnerGroup, wait_for
from unstable_core.types import Step

#: prompts of different lengths, so that micro-batches pad differently on each rank
EXACTNESS_PROMPTS = (
    "play a move",
    "hello there, which square is free now?",
    "one two three",
    "x o x",
    "the board is empty and it is your turn to play",
    "go",
    "[0] [1] [2] | [3] [4] [5] | [6] [7] [8] choose one",
    "your opponent played 4",
)


def exactness_batch(model_path: str, seed: int = 0) -> list[Step]:
    """Steps sampled by the real backend from `model_path`, made to look like a real run's batch: 4 games of
    2 turns (episodes, for A2C), two env ids (per-env z-scores), rewards of both signs, and behaviour
    log-probs moved off the policy (lagged data: importance weights and PPO's behaviour weight bind)."""
    from unstable_core.testing import sampled_steps

    rng = random.Random(seed)
    steps = sampled_steps(model_path, temperature=1.0, prompts=EXACTNESS_PROMPTS, seed=seed)
    batch = []
    for i, s in enumerate(steps):
        game, turn = divmod(i, 2)
        outcome = 1.0 if game % 2 == 0 else -1.0
        batch.append(
            attrs.evolve(
                s,
                env_id=f"env-{game % 2}",
                game_idx=game,
                turn=turn,
                final_reward=outcome,
                shaping=rng.uniform(-0.2, 0.2),
                reward=outcome + rng.uniform(-0.5, 0.5),
                logprobs=[lp + rng.uniform(-0.3, 0.3) for lp in s.logprobs],
                policy_version=0,
            )
        )
    return batch


def updated_parameters(
    learner: str,
    model_path: str,
    batch: list[Step],
    *,
    group: LearnerGroup | None = None,
    rank: int = 0,
    device: str = "cpu",
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The trainable parameters (name -> CPU tensor) and metrics after one `update(batch)` of the
    registered `learner`, as rank `rank` of `group` (None: no process group)."""
    from unstable_core import plugins

    def update(agent: Any) -> dict[str, Any]:
        metrics = agent.update(batch)
        names = {id(p): n for n, p in agent.model.named_parameters()}
        params = {
            names.get(id(p), f"extra.{i}"): p.detach().float().cpu().clone()
            for i, p in enumerate(agent.trainable_parameters())
        }
        return {"params": params, "metrics": metrics}

    cls = plugins.load("learner", learner)
    with tempfile.TemporaryDirectory() as run_dir:
        settings = {"mini_batch_size": 2, "batch_size": len(batch), "seed": 3, **(settings or {})}
        agent = cls.create(model_path, run_dir=run_dir, device=device, **settings)
        agent.initialize_algorithm()
        return (group or LearnerGroup(1)).run(agent, rank, update)


def _worker(group: LearnerGroup, rank: int, args: dict[str, Any], out_dir: str) -> None:
    import torch

    torch.set_num_threads(args.pop("threads"))  # the same on every side: threads change matmul sums
    device = args.pop("device")
    if device == "cuda":
        device = f"cuda:{rank}"
        torch.cuda.set_device(rank)
    result = updated_parameters(group=group, rank=rank, device=device, **args)
    torch.save(result, os.path.join(out_dir, f"world-{group.world_size}-rank-{rank}.pt"))


@attrs.frozen
class Agreement:
    """How far N workers' parameters after one update are from one worker's: the largest relative difference
    ||a - b|| / ||b|| over the parameter tensors, and the rank 0's metrics beside the single worker's."""

    learner: str
    world_size: int
    max_relative_diff: float
    ranks_identical: bool  # every rank ended with bitwise the same parameters
    tensors: int
    metrics_max_abs_diff: float


def compare_workers(
    learner: str,
    model_path: str,
    batch: list[Step],
    *,
    world_size: int = 2,
    backend: str = "gloo",
    device: str = "cpu",
    settings: dict[str, Any] | None = None,
    threads: int = 1,
) -> Agreement:
    """Run one update by `world_size` spawned processes (one group on `backend`) and by one spawned process
    alone, each with `threads` torch threads, and compare the trainable parameters. Every side gets the same
    thread count, which changes the kernels' sums: a reference with 1 thread against workers with 2 was
    2.7e-6 off (reinforce, tiny model), where the same count on both sides agrees bitwise."""
    import torch

    args = {"learner": learner, "model_path": model_path, "batch": batch}
    args.update(device=device, settings=settings, threads=threads)
    with tempfile.TemporaryDirectory() as out_dir:
        for world in (1, world_size):
            codes = wait_for(LearnerGroup.here(world, backend).spawn(_worker, dict(args), out_dir))
            if any(code != 0 for code in codes):
                raise RuntimeError(f"a worker of the {world}-worker update failed: exit codes {codes}")
        single = torch.load(Path(out_dir) / "world-1-rank-0.pt")
        ranks = [torch.load(Path(out_dir) / f"world-{world_size}-rank-{r}.pt") for r in range(world_size)]
    base = single["params"]
    worst = 0.0
    for name, value in base.items():
        other = ranks[0]["params"][name]
        worst = max(worst, float((other - value).norm() / value.norm().clamp(min=1e-12)))
    identical = all(
        torch.equal(ranks[0]["params"][n], r["params"][n]) for r in ranks[1:] for n in ranks[0]["params"]
    )
    shared = set(single["metrics"]) & set(ranks[0]["metrics"]) - {"time/prepare_s", "time/update_s"}
    metric_gap = max((abs(single["metrics"][k] - ranks[0]["metrics"][k]) for k in shared), default=0.0)
    return Agreement(learner, world_size, worst, identical, len(base), metric_gap)


def _rank_zero_fails(group: LearnerGroup, rank: int, model_path: str, batch: list[Step], out: str) -> None:
    """Rank `rank` of a gloo group of real learners on one batch, where rank 0 raises in its first
    micro-batch (as an out-of-memory error or a bug would) while the others compute theirs and then wait
    in the update's collectives. Writes `out/rank-<rank>`: how this rank's part ended."""
    import torch

    from unstable_core import plugins
    from unstable_core.learners.data_parallel import follow, lead

    def fail(micro: list[Any], scale: float) -> dict[str, float]:
        raise RuntimeError("rank 0 failed mid-update")

    def train(agent: Any) -> str:
        ranks = agent.data_parallel
        try:
            if rank == 0:
                agent._update = fail
                lead(ranks, lambda: (ranks.broadcast(batch), agent.update(batch)))
            else:
                follow(agent)
        except Exception as exc:  # what this rank's train() would raise
            return f"raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return "returned"

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as run_dir:
        agent = plugins.load("learner", "reinforce").create(
            model_path, run_dir=run_dir, device="cpu", mini_batch_size=2, batch_size=len(batch), seed=3
        )
        agent.initialize_algorithm()
        Path(out, f"rank-{rank}").write_text(group.run(agent, rank, train))


def when_rank_zero_fails(
    model_path: str, batch: list[Step], world_size: int = 2, timeout_s: float = 600
) -> list[str | None]:
    """How each rank of a `world_size` gloo group ended when rank 0 raised mid-update (`_rank_zero_fails`),
    waiting at most `timeout_s` for each process: None for a rank still waiting then (it is killed)."""
    with tempfile.TemporaryDirectory() as out:
        wait_for(LearnerGroup.here(world_size).spawn(_rank_zero_fails, model_path, batch, out), timeout_s)
        files = [Path(out, f"rank-{rank}") for rank in range(world_size)]
        return [f.read_text() if f.is_file() else None for f in files]
