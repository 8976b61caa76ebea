"""The installed distribution registers its samplers through the `unstable` entry point."""

import pytest
from unstable_samplers.env import AdaptiveEnvSampler, UniformRandomEnvSampler
from unstable_samplers.model import (
    AsynchronousModelSampler,
    FixedOpponentModelSampler,
    MirrorModelSampler,
    TrueSkillModelSampler,
    WinRateModelSampler,
)

from unstable_core import plugins


@pytest.fixture
def fresh_plugins(monkeypatch):
    monkeypatch.delenv("UNSTABLE_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("UNSTABLE_STRICT_PLUGINS", raising=False)
    plugins.reset()
    yield plugins
    plugins.reset()


def test_registry_lists_and_loads_the_samplers(fresh_plugins):
    registry = fresh_plugins.get_registry()
    expected_env = {"random": UniformRandomEnvSampler, "adaptive": AdaptiveEnvSampler}
    expected_model = {
        "mirror": MirrorModelSampler,
        "fixed": FixedOpponentModelSampler,
        "lagged": AsynchronousModelSampler,
        "trueskill": TrueSkillModelSampler,
        "win-rate": WinRateModelSampler,
    }
    for kind, expected in (("env_sampler", expected_env), ("model_sampler", expected_model)):
        for name, cls in expected.items():
            component = registry.get(kind, name)
            assert component.dist == "unstable-samplers"
            assert component.load() is cls
    (info,) = [p for p in fresh_plugins.list_plugins() if p.name == "unstable-samplers"]
    assert info.error is None
    assert info.hooks == ["register_env_samplers", "register_model_samplers"]
    assert info.provides == {
        "env_sampler": ["random", "adaptive"],
        "model_sampler": ["mirror", "fixed", "lagged", "trueskill", "win-rate"],
    }
