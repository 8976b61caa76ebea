"""benchmarks/learner.py --learner-workers: one update by 1 worker against 2 (gloo), the bytes all-reduced,
and the NCCL arithmetic (no timing is asserted)."""

import re
import subprocess
import sys
from pathlib import Path

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
