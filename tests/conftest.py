import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """Path of a tiny random-weight Llama with SmolLM2's tokenizer (built once per test session, shared by
    the core's and the plugins' tests)."""
    from unstable_core.testing import session_tiny_model

    return session_tiny_model(tmp_path_factory)


@pytest.fixture(scope="session")
def import_benchmark():
    """Import a script of benchmarks/ by name (they are scripts, not a package: on sys.path only meanwhile)."""

    def load(name: str):
        sys.path.insert(0, str(BENCHMARKS))
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(str(BENCHMARKS))

    return load
