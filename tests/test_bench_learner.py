"""benchmarks/learner.py: the FLOP count of an update (against a hand count and torch's own counter), its
FLOP/s rows, and --learner-workers: one update by 1 worker against 2 (gloo), the bytes all-reduced, and the
NCCL arithmetic (no timing is asserted)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def test_the_nccl_arithmetic_counts_the_float64_lora_gradient():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from learner import data_parallel_arithmetic
        from memory_arithmetic import QWEN3, lora_params
    finally:
        sys.path.remove(str(BENCHMARKS))
    two = data_parallel_arithmetic(2, 100.0, 8192, 989.0, 0.4)
    assert two["all_reduce_bytes"] == 8 * lora_params(QWEN3["Qwen3-1.7B"], 32)
    assert two["all_reduce_s"] == two["all_reduce_bytes"] / 100e9  # a ring moves 2 (N-1)/N = 1 of it
    eight = data_parallel_arithmetic(8, 100.0, 8192, 989.0, 0.4)
    assert 0 < eight["efficiency"] < two["efficiency"] < 1


def test_two_gloo_workers_are_timed_against_one():
    cmd = [sys.executable, str(BENCHMARKS / "learner.py"), "--learner-workers", "2", "--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert re.search(r"one update, 1 worker .*\d ms", proc.stdout)
    assert re.search(r"one update, 2 workers .*\d ms", proc.stdout)
    bytes_line = re.search(r"bytes all-reduced per update: ([\d,]+)", proc.stdout)
    assert bytes_line and int(bytes_line.group(1).replace(",", "")) > 0
    assert "efficiency 0." in proc.stdout


def _flops_module():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import learner_flops
        from memory_arithmetic import Arch
    finally:
        sys.path.remove(str(BENCHMARKS))
    return learner_flops, Arch


def test_micro_batch_token_counts_take_a_shared_prefix_once():
    flops, _ = _flops_module()
    mb = flops.MicroBatch(lengths=(5, 4), completion=3, shared=2)
    assert mb.tokens == 2 + 3 + 2
    assert mb.positions == 2 + 2 * 3  # the rest of each row padded to the longer one
    assert mb.pairs == 3 + (15 - 3) + (10 - 3)  # the prefix's 1+2 pairs once, then each row's own queries


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_flop_count_of_a_tiny_shape_matches_a_hand_count(checkpointing):
    flops, arch_cls = _flops_module()
    # hidden 4, intermediate 8, 2 layers, 2 heads of 2 dims, 1 kv head, vocab 10; LoRA rank 1 on all seven
    arch = arch_cls(4, 2, 8, 2, 1, 2, 10, True)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    micro = [flops.MicroBatch(lengths=(3, 2), completion=2)]
    got = flops.update_flops(arch, 1, targets, micro, checkpointing=checkpointing)
    # multiply-adds a token and layer: frozen q 16, k 8, v 8, o 16, gate 32, up 32, down 32 = 144;
    # LoRA r (in + out): q 8, k 6, v 6, o 8, gate 12, up 12, down 12 = 64. 5 tokens; 6 + 3 = 9 causal pairs,
    # each 2 heads x 2 dims in QK^T and again in AV
    layer_forward = 5 * (144 + 64) + 2 * 9 * 4  # 1112
    assert got.forward == 2 * 2 * layer_forward
    assert got.head == 2 * 2 * 4 * 10  # 2 completion positions x [4] x [4, 10]
    layer_backward = 5 * (144 + 2 * 64) + 4 * 9 * 4  # 1504: input gradients, LoRA's twice, attention's twice
    if checkpointing:
        assert got.backward == 2 * (2 * layer_backward + 2 * 4 * 10)
        assert got.recompute == 2 * 2 * (layer_forward - 5 * 4)  # less down_proj's LoRA B (1 x 4 a token)
        assert got.attention == 2 * 2 * 4 * 2 * 9 * 4  # forward, backward (twice), recompute
        assert got.total == 15152
    else:
        # layer 0's q, k, v and their LoRA A need no input gradient: 5 tokens x (16 + 8 + 8 + 3 x 4)
        assert got.backward == 2 * (2 * layer_backward - 5 * 44 + 2 * 4 * 10)
        assert got.recompute == 0
        assert got.attention == 2 * 2 * 3 * 2 * 9 * 4
        assert got.total == 10344


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_flop_count_is_torchs_count_of_an_updates_matrix_products(tiny_model, tmp_path, checkpointing):
    """On unpacked layers (torch's counter does not see oneDNN's packed linear), rows of one length (no
    padding, which the kernels compute and the count leaves out) sharing a 20-token prompt prefix (run once
    without checkpointing); attention runs in sdpa, which the counter leaves out, so the count does too."""
    from torch.utils.flop_counter import FlopCounterMode

    from unstable_core import plugins
    from unstable_core.inference.hf.packed_linear import unpack_linear_layers
    from unstable_core.types import Step

    flops, _ = _flops_module()
    learner = plugins.load("learner", "reinforce").create(
        tiny_model,
        run_dir=tmp_path,
        device="cpu",
        batch_size=4,
        mini_batch_size=2,
        gradient_checkpointing=checkpointing,
        lora_config={"lora_rank": 8},
    )
    learner.initialize_algorithm()
    unpack_linear_layers(learner.model)
    prefix = list(range(100, 120))
    batch = [
        Step(pid=0, env_id="t", obs="", act="", prompt_ids=prefix + [10 + i] * 8, completion_ids=[5, 6, 7])
        for i in range(4)
    ]
    counted, micro = flops.learner_flops(learner, batch)
    assert [m.shared for m in micro] == ([0, 0] if checkpointing else [20, 20])
    counter = FlopCounterMode(display=False)
    with counter:
        learner.update(batch)
    products = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    assert counted.total - counted.attention == products.get("aten.mm", 0) + products.get("aten.addmm", 0)


def test_the_benchmark_prints_the_update_flops_against_the_matmul_peak():
    cmd = [sys.executable, str(BENCHMARKS / "learner.py"), "--repeats", "1", "--threads", "1"]
    cmd += ["--batch-size", "4", "--mini-batch-size", "2", "--prompt-len", "16", "--completion-len", "4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert re.search(r"ratio \(cpu time\) +\d", proc.stdout)  # the existing rows are kept
    counted = re.search(r"counted: (\d+\.\d+) GFLOP an update", proc.stdout)
    assert counted and float(counted.group(1)) > 0
    assert re.search(r"achieved: [\d.]+ GFLOP/s .* = [\d.]+ of the peak [\d.]+ GFLOP/s", proc.stdout)
    for phase in ("collate", "decoder forward", "LM head", "backward", "recompute", "AdamW step", "the rest"):
        assert re.search(rf"^{re.escape(phase)}.* +[\d.]+ +[\d.]+%", proc.stdout, re.MULTILINE), phase
