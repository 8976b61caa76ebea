"""Unit tests of `unstable_core.registry`: lazy targets, provenance, unknown and duplicate names."""

from __future__ import annotations

import sys

import pytest

from unstable_core import plugins
from unstable_core.errors import UnstableError
from unstable_core.registry import (
    _LOCAL_PLUGIN_DIRS,
    KNOWN_PROVIDERS,
    Component,
    DuplicateComponentError,
    Registry,
    UnknownComponentError,
    install_hint,
    load_target,
)


def _component(kind: str, name: str, target: object, dist: str = "dist-a", plugin: str = "ep") -> Component:
    return Component(kind, name, target, "", plugin=plugin, dist=dist)


def test_lazy_target_is_imported_only_on_load(tmp_path, monkeypatch):
    (tmp_path / "utr_lazy_mod.py").write_text("class Thing:\n    value = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "utr_lazy_mod", raising=False)
    registry = Registry()
    registry.add(_component("learner", "thing", "utr_lazy_mod:Thing"))

    component = registry.get("learner", "thing")
    assert "utr_lazy_mod" not in sys.modules
    assert component.target_name == "utr_lazy_mod:Thing"

    cls = registry.load("learner", "thing")
    assert "utr_lazy_mod" in sys.modules
    assert cls.value == 7
    assert component.target is cls  # resolved once, kept
    assert (component.dist, component.plugin) == ("dist-a", "ep")
    monkeypatch.delitem(sys.modules, "utr_lazy_mod")


def test_object_target_and_nested_attribute():
    registry = Registry()
    registry.add(_component("template", "upper", str.upper))
    assert registry.load("template", "upper")("ab") == "AB"
    assert load_target("os.path:join") is __import__("os").path.join
    assert load_target("unstable_core.registry:Registry.load") is Registry.load


def test_names_and_iteration_are_sorted_per_kind():
    registry = Registry()
    for name in ("b", "a"):
        registry.add(_component("env_sampler", name, dict))
    registry.add(_component("tracker", "t", dict))
    assert registry.names("env_sampler") == ["a", "b"]
    assert [(c.kind, c.name) for c in registry] == [
        ("env_sampler", "a"),
        ("env_sampler", "b"),
        ("tracker", "t"),
    ]


def test_unknown_name_lists_installed_names_on_one_line():
    registry = Registry()
    registry.add(_component("learner", "reinforce", dict))
    registry.add(_component("learner", "ppo", dict))
    with pytest.raises(UnknownComponentError) as info:
        registry.get("learner", "reinforc")
    message = str(info.value)
    assert (
        message == "unknown learner 'reinforc'; installed learners: ppo, reinforce; did you mean 'reinforce'?"
    )
    assert isinstance(info.value, UnstableError)


def test_unknown_name_of_our_plugins_names_the_package():
    registry = Registry()
    with pytest.raises(UnknownComponentError) as info:
        registry.get("learner", "a2c")
    message = str(info.value)
    assert message.startswith(
        "unknown learner 'a2c'; installed learners: none; 'a2c' is provided by unstable-a2c"
    )
    assert "pip install unstable-a2c" in message
    assert "\n" not in message
    with pytest.raises(UnknownComponentError, match="pip install unstable-samplers"):
        registry.get("model_sampler", "trueskill")


def test_unknown_name_points_at_a_broken_provider():
    registry = Registry(broken={"unstable-a2c": "could not import 'unstable_a2c': ImportError: boom"})
    with pytest.raises(UnknownComponentError) as info:
        registry.get("learner", "a2c")
    assert "unstable-a2c, which is installed but broken: could not import" in str(info.value)
    with pytest.raises(
        UnknownComponentError, match=r"plugins with errors: unstable-a2c \(see `unstable plugins`\)"
    ):
        registry.get("learner", "mine")


def test_unknown_kind():
    registry = Registry()
    with pytest.raises(UnstableError, match="unknown component kind 'learners'; the kinds are: learner, "):
        registry.get("learners", "x")
    with pytest.raises(UnstableError, match="unknown component kind"):
        registry.add(_component("learners", "x", dict))


def test_duplicate_names_both_distributions():
    registry = Registry()
    registry.add(_component("reward_transform", "bonus", dict, dist="dist-a"))
    with pytest.raises(DuplicateComponentError) as info:
        registry.add(_component("reward_transform", "bonus", list, dist="dist-b"))
    error = info.value
    assert str(error) == (
        "reward_transform 'bonus' is registered twice: by dist-a and by dist-b; "
        "uninstall one of the two distributions"
    )
    assert (error.kind, error.name, error.dists) == ("reward_transform", "bonus", ("dist-a", "dist-b"))
    # the same name in another kind is no conflict
    registry.add(_component("learner", "bonus", list, dist="dist-b"))


def test_marked_conflict_fails_on_use_naming_both():
    registry = Registry()
    registry.add(_component("reward_transform", "bonus", dict, dist="dist-a"))
    with pytest.raises(DuplicateComponentError) as info:
        registry.add(_component("reward_transform", "bonus", list, dist="dist-b"))
    registry.mark_conflict(info.value)
    with pytest.raises(DuplicateComponentError, match="by dist-a and by dist-b") as again:
        registry.load("reward_transform", "bonus")
    assert again.value.dists == ("dist-a", "dist-b")


def test_same_distribution_twice():
    registry = Registry()
    registry.add(_component("tracker", "t", dict, dist="dist-a"))
    with pytest.raises(
        DuplicateComponentError, match="'t' is registered twice by dist-a; register each name once"
    ):
        registry.add(_component("tracker", "t", dict, dist="dist-a"))


@pytest.mark.parametrize(
    "target", ["no_colon", "pkg.mod:", ":Name", "pkg mod:Name", "pkg.mod:Na-me", "a:b:c"]
)
def test_bad_import_string_is_rejected_when_registered(target):
    registry = Registry()
    with pytest.raises(UnstableError, match="must look like 'package.module:Name'"):
        registry.add(_component("learner", "x", target))
    assert registry.names("learner") == []


def test_import_string_of_a_missing_module_or_attribute():
    registry = Registry()
    registry.add(_component("learner", "ghost", "utr_no_such_module:Thing", dist="dist-g"))
    registry.add(_component("learner", "typo", "unstable_core.registry:Regsitry", dist="dist-t"))
    with pytest.raises(UnstableError) as info:
        registry.load("learner", "ghost")
    assert str(info.value) == (
        "learner 'ghost' of dist-g: cannot import 'utr_no_such_module:Thing': ModuleNotFoundError: "
        "No module named 'utr_no_such_module'; reinstall or upgrade dist-g"
    )
    with pytest.raises(UnstableError, match="'unstable_core.registry' has no attribute 'Regsitry'"):
        registry.load("learner", "typo")


@pytest.mark.parametrize("name", ["", "has space", "-lead", "a:b", None])
def test_bad_names_are_rejected(name):
    with pytest.raises(UnstableError, match="registered a learner named"):
        Registry().add(_component("learner", name, dict))


def test_non_callable_target_is_rejected():
    with pytest.raises(UnstableError, match="register a class, a factory or an import string"):
        Registry().add(_component("learner", "x", 42))


def test_install_hint():
    assert install_hint("unstable-a2c") == (
        "pip install unstable-a2c (or `pip install -e plugins/unstable_a2c` from a checkout of unstable)"
    )
    assert install_hint("someone-else") == "pip install someone-else"


def test_known_providers_are_what_our_installed_plugins_register(monkeypatch):
    """KNOWN_PROVIDERS (which distribution to install for a name) is kept by hand for plugins that are not
    installed, so it drifts: it lacked the model sampler `win-rate`. Here, with all of ours installed,
    it must be exactly what they register."""
    monkeypatch.delenv(plugins.LOAD_ENV, raising=False)
    monkeypatch.delenv(plugins.STRICT_ENV, raising=False)
    plugins.reset()
    try:
        found = {p.name: p for p in plugins.list_plugins()}
        missing = sorted(set(_LOCAL_PLUGIN_DIRS) - set(found))
        assert not missing, f"install {', '.join(missing)} (pip install -e plugins/...) to check the list"
        assert not [found[d].error for d in _LOCAL_PLUGIN_DIRS if found[d].error]
        registered: dict[str, dict[str, str]] = {}
        for component in plugins.get_registry():
            if component.dist in _LOCAL_PLUGIN_DIRS:
                registered.setdefault(component.kind, {})[component.name] = component.dist
    finally:
        plugins.reset()
    assert registered == {kind: names for kind, names in KNOWN_PROVIDERS.items() if names}


def test_known_providers_are_what_the_repositorys_plugins_register(monkeypatch):
    """The same lists against the source of plugins/ itself, installed or not: each folder's distribution
    (its pyproject.toml) is in _LOCAL_PLUGIN_DIRS, and its entry points' hooks register exactly the names
    KNOWN_PROVIDERS gives it."""
    import importlib
    from pathlib import Path

    import pluggy

    from unstable_core import hookspecs
    from unstable_core.config import tomllib  # the standard library's, or tomli before Python 3.11

    root = Path(__file__).resolve().parents[1]
    state = plugins.PluginState(
        manager=pluggy.PluginManager(hookspecs.PROJECT_NAME), registry=Registry(), plugins=[]
    )
    state.manager.add_hookspecs(hookspecs)
    dirs = {}
    for pyproject in sorted(root.glob("plugins/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        folder = pyproject.parent
        dirs[project["name"]] = folder.relative_to(root).as_posix()
        monkeypatch.syspath_prepend(str(folder))
        info = plugins.PluginInfo(name=project["name"], version=project["version"])
        for name, target in project["entry-points"]["unstable"].items():
            module = importlib.import_module(target)
            assert Path(module.__file__).resolve().is_relative_to(folder), f"{target} is not {folder}'s"
            plugins._add_plugin(state, info, name, module)
        assert info.error is None, info.error
    assert dirs == _LOCAL_PLUGIN_DIRS
    registered: dict[str, dict[str, str]] = {}
    for component in state.registry:
        registered.setdefault(component.kind, {})[component.name] = component.dist
    assert registered == {kind: names for kind, names in KNOWN_PROVIDERS.items() if names}
