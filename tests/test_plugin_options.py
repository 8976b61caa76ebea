"""A plugin's component built from the user's options: the keys it takes, and whatever its code raises
as one ConfigError line naming the option, the registered name and those keys."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from unstable_core.config import load_config
from unstable_core.errors import ConfigError
from unstable_core.plugins import get_registry, registered_name
from unstable_core.runtime.launch.components import Components
from unstable_core.runtime.launch.plugin_options import check_learner_options, construct, option_names
from unstable_core.samplers import BaseModelSampler


@attrs.define
class Fields:
    alpha: float = 1.0
    beta: int = 2
    hidden: dict = attrs.field(factory=dict, init=False)


class Plain:
    def __init__(self, gamma=0.5, *, delta="x"):
        self.gamma, self.delta = gamma, delta


class NoInit:
    pass


class Sampler(BaseModelSampler):  # **kwargs go up to the core's base, which refuses the unknown
    def __init__(self, seed=0, k=3, **kwargs):
        super().__init__(seed, **kwargs)


class Open:  # **kwargs that nothing in the core refuses: its keys cannot be told
    def __init__(self, **anything):
        self.anything = anything


def test_option_names():
    assert option_names(Fields) == ["alpha", "beta"]
    assert option_names(Plain) == ["gamma", "delta"]
    assert option_names(NoInit) == []
    assert option_names(Sampler, fixed={"seed"}) == ["k"]
    env_sampler = get_registry().load("env_sampler", "random")
    assert option_names(env_sampler, positional=2, fixed={"seed"}) == ["repeat"]
    assert option_names(Open) is None
    assert option_names(lambda **kw: kw) is None


def test_construct_names_the_option_the_component_and_its_keys():
    assert construct("--x", "fields", Fields, {"beta": 3}).beta == 3
    with pytest.raises(ConfigError) as unknown:
        construct("--step-transform", "fields", Fields, {"gamma": 1, "zeta": 2})
    assert (
        str(unknown.value) == "--step-transform fields: unknown option gamma, zeta; fields takes alpha, beta"
    )

    class Raises:
        def __init__(self, n=1):
            raise ValueError(f"n must be odd,\n  got {n}")

    with pytest.raises(ConfigError) as plain:
        construct("--final-transform", "odd", Raises, {"n": 2})
    assert str(plain.value) == "--final-transform odd: ValueError: n must be odd, got 2; odd takes n"

    class Refuses:
        def __init__(self, n=1):
            raise ConfigError("n must be odd")

    with pytest.raises(ConfigError, match=r"^--final-transform odd: n must be odd; odd takes n$"):
        construct("--final-transform", "odd", Refuses, {})
    with pytest.raises(
        ConfigError, match=r"^--x open: AssertionError; see `unstable plugins` for open's options$"
    ):
        construct("--x", "open", lambda **kw: (_ for _ in ()).throw(AssertionError()), {"a": 1})


class Checked:
    @classmethod
    def check_options(cls, algorithm_kwargs, importance_cap=None):
        if algorithm_kwargs:
            raise RuntimeError("takes no options")
        if importance_cap is not None:
            raise ValueError("no cap here")


def test_learner_options_name_the_option_that_was_refused():
    with pytest.raises(
        ConfigError, match=r"^--algorithm-config: learner mine: RuntimeError: takes no options$"
    ):
        check_learner_options("mine", Checked, {"a": 1}, importance_cap=2.0)
    with pytest.raises(ConfigError, match=r"^--importance-cap: learner mine: ValueError: no cap here$"):
        check_learner_options("mine", Checked, {}, importance_cap=2.0)
    check_learner_options("mine", Checked, {}, importance_cap=None)
    reinforce = get_registry().load("learner", "reinforce")
    with pytest.raises(
        ConfigError, match=r"^--algorithm-config: unknown reinforce option\(s\) x; allowed: none$"
    ):
        check_learner_options("reinforce", reinforce, {"x": 1}, importance_cap=None)


def test_registered_name():
    from unstable_core.testing import sign_flipped

    reinforce = get_registry().load("learner", "reinforce")
    assert registered_name("learner", reinforce) == "reinforce"
    assert registered_name("learner", sign_flipped(reinforce)) == "SignFlippedREINFORCELearner"


def test_a_transform_of_another_stage_names_its_option():
    cfg = load_config(None, {"step_transforms": ["normalize"]})
    with pytest.raises(
        ConfigError, match=r"^--step-transform normalize: NormalizeRewards is a sampling transform"
    ):
        Components.resolve(cfg, Path("unused"))
