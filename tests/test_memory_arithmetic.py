"""benchmarks/memory_arithmetic.py: its per-layer formula is what torch saves, its parameter counts are
Qwen's, and the memory tables of docs/gpus-and-clusters.md and README.md are its output."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "memory_arithmetic.py"


@pytest.fixture(scope="module")
def arithmetic():
    spec = importlib.util.spec_from_file_location("memory_arithmetic", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["memory_arithmetic"] = module  # attrs classes resolve their module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("memory_arithmetic", None)


def test_parameter_counts_are_qwens(arithmetic):
    """Qwen's model cards: 1.7B (1.4B non-embedding), 4.0B (3.6B), 8.2B (6.95B), 14.8B (13.2B), 32.8B (31.2B)."""
    counts = {name: arithmetic.base_params(a) / 1e9 for name, a in arithmetic.QWEN3.items()}
    for name, billions in {"1.7B": 1.72, "4B": 4.02, "8B": 8.19, "14B": 14.77, "32B": 32.76}.items():
        assert counts[f"Qwen3-{name}"] == pytest.approx(billions, abs=0.01)
    assert arithmetic.lora_params(arithmetic.QWEN3["Qwen3-8B"], 32) == 87_293_952


@pytest.mark.parametrize(
    "shape",
    [(256, 2, 768, 4, 2, 64, 128), (320, 1, 1216, 8, 2, 64, 96), (512, 1, 1536, 8, 2, 32, 128)],
)
def test_the_layer_formula_is_what_autograd_saves(arithmetic, shape):
    """A real Qwen3 decoder layer (transformers, bf16, sdpa) with the project's LoRA: the bytes autograd
    keeps for its backward, per token, are `layer_bytes_per_token`, to within 1%, with and without the
    padding mask (with one, k and v are kept repeated to every query head)."""
    a = arithmetic.Arch(*shape, tied=False)
    for rank, padded in ((8, True), (32, True), (32, False)):
        measured = arithmetic.measured_layer_bytes_per_token(a, rank, padded)
        assert measured == pytest.approx(arithmetic.layer_bytes_per_token(a, rank, padded), rel=0.01)


def test_the_docs_table_is_the_scripts_output(arithmetic):
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == arithmetic.table()
    assert arithmetic.table() in (ROOT / "docs" / "gpus-and-clusters.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for name in ("Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B"):
        total = arithmetic.worker_memory(arithmetic.QWEN3[name])["total"] / arithmetic.GIB
        assert f"| {name} | {total:.1f} GiB |" in readme
