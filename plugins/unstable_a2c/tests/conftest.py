import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """Path of a tiny random-weight Llama with SmolLM2's tokenizer (built once per test session, shared by
    the core's and the plugins' tests)."""
    from unstable_core.testing import session_tiny_model

    return session_tiny_model(tmp_path_factory)
