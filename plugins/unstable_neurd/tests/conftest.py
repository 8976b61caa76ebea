import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """Path of a tiny random-weight Llama with SmolLM2's tokenizer (built once per test session)."""
    from unstable_core.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))
