"""The import paths plugins and scripts use keep working after the core's third restructuring (config/ a
package, inference/ split by engine, base classes in `<kind>/base.py`); a moved name is announced for one
release with a DeprecationWarning."""

from __future__ import annotations

import importlib
import warnings

import pytest

from unstable_core.registry import load_target


@pytest.mark.parametrize(
    ("module", "name", "home"),
    [
        ("unstable_core.learners", "BaseLearner", "unstable_core.learners.base"),
        ("unstable_core.learners", "LearnerConfig", "unstable_core.learners.settings"),
        ("unstable_core.learners", "DEFAULT_LORA_CFG", "unstable_core.config.lora"),
        ("unstable_core.rewards", "FinalRewardTransform", "unstable_core.rewards.base"),
        ("unstable_core.rewards", "StepRewardTransform", "unstable_core.rewards.base"),
        ("unstable_core.rewards", "SamplingRewardTransform", "unstable_core.rewards.base"),
        ("unstable_core.samplers", "BaseEnvSampler", "unstable_core.samplers.base"),
        ("unstable_core.samplers", "BaseModelSampler", "unstable_core.samplers.base"),
        ("unstable_core.samplers", "CURRENT", "unstable_core.samplers.base"),
        ("unstable_core.envs", "Task", "unstable_core.envs.tasks"),
        ("unstable_core.config", "RunConfig", "unstable_core.config.run_config"),
        ("unstable_core.config", "load_config", "unstable_core.config.load"),
        ("unstable_core.inference.hf", "TransformersBackend", "unstable_core.inference.hf.backend"),
        ("unstable_core.inference.vllm", "VLLMBackend", "unstable_core.inference.vllm.backend"),
    ],
)
def test_a_public_name_is_where_plugins_import_it_and_is_its_homes(module, name, home):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a kept path is no deprecated one
        kept = getattr(importlib.import_module(module), name)
    assert kept is getattr(importlib.import_module(home), name)


def test_the_registered_import_strings_of_the_backends_resolve_old_and_new():
    from unstable_core.inference.hf.backend import TransformersBackend

    assert load_target("unstable_core.inference.hf:TransformersBackend") is TransformersBackend
    assert load_target("unstable_core.inference.hf.backend:TransformersBackend") is TransformersBackend


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("run_probe", "unstable_core.eval.probes"),
        ("ScriptedPlayer", "unstable_core.games.players"),
        ("Figure", "unstable_core.probes"),
        ("Position", "unstable_core.probes"),
        ("ProbeResult", "unstable_core.probes"),
        ("measure", "unstable_core.probes"),
        ("ModelPolicy", "unstable_core.probes.model_policy"),
    ],
)
def test_the_names_of_games_analysis_moved_and_warn_for_one_release(name, home):
    """What a plugin written against `register_game_analyses` imported from `unstable_core.games.analysis`
    (the guide's import line then) still imports, with a DeprecationWarning naming the new home."""
    analysis = importlib.import_module("unstable_core.games.analysis")
    with pytest.warns(DeprecationWarning, match=f"moved to {home}.{name}"):
        assert getattr(analysis, name) is getattr(importlib.import_module(home), name)
    with pytest.raises(AttributeError):
        analysis.nothing_here  # noqa: B018


def test_textarena_imports_without_nltk_and_a_word_list_still_loads_on_use():
    """`import unstable_core` makes TextArena's word lists lazy (`lazy_word_lists`): games without words never
    import nltk; a word list read executes the real module."""
    import subprocess
    import sys

    code = (
        "import sys, unstable_core, textarena\n"
        "env = textarena.make('TicTacToe-v0'); env.reset(num_players=2, seed=0); env.get_observation()\n"
        "print('nltk' in sys.modules)\n"
        "from textarena.envs.utils.word_lists import EnglishDictionary\n"
        "print('nltk' in sys.modules, callable(EnglishDictionary))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["False", "True True"], out
