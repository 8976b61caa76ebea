"""Plugin discovery and `unstable plugins`, with real distributions.

In-process tests write installed distributions by hand (a module and a `.dist-info` with its entry points,
as pip leaves them) into a folder put on sys.path. The acceptance tests pip-install three throw-away
projects once per module (`--target` a temporary folder, so that the venv other people use at the same
time never sees them) and run the CLI in subprocesses with that folder on PYTHONPATH.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from unstable_core import __version__, plugins
from unstable_core.errors import ConfigError, UnstableError
from unstable_core.plugins import PluginLoadError, normalize_dist
from unstable_core.registry import DuplicateComponentError, UnknownComponentError

HEAVY = ("torch", "transformers", "ray")


@pytest.fixture(autouse=True)
def fresh_discovery(monkeypatch):
    """Each test discovers again, with the plugin variables unset, and forgets its throw-away modules."""
    monkeypatch.delenv(plugins.LOAD_ENV, raising=False)
    monkeypatch.delenv(plugins.STRICT_ENV, raising=False)
    plugins.reset()
    yield
    plugins.reset()
    for name in [m for m in sys.modules if m.startswith("utp_")]:
        del sys.modules[name]


def write_dist(root: Path, dist: str, modules: dict[str, str], entry_points: dict[str, str]) -> None:
    """An installed distribution as pip leaves it: its modules and a `.dist-info` with the entry points."""
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.3\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[unstable]\n{lines}")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path for hand-written distributions; only those (and the built-ins) are loaded."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def add(dist: str, modules: dict[str, str], entry_points: dict[str, str]) -> None:
        write_dist(tmp_path, dist, modules, entry_points)
        loaded = [d for d in os.environ.get(plugins.LOAD_ENV, "").split(",") if d]
        monkeypatch.setenv(plugins.LOAD_ENV, ",".join([*loaded, dist]))

    return add


def by_name(infos: list[plugins.PluginInfo]) -> dict[str, plugins.PluginInfo]:
    return {p.name: p for p in infos}


GOOD = """
from unstable_core import hookimpl

class Tracker:
    pass

@hookimpl
def register_trackers(register):
    register("utp-tracker", Tracker, "a tracker")
"""


# ---------------------------------------------------------------- discovery, in-process


def test_builtins_are_registered_through_the_hooks(monkeypatch):
    monkeypatch.setenv(plugins.LOAD_ENV, "")
    assert plugins.list_plugins() == []
    (core,) = plugins.list_plugins(include_builtins=True)
    assert (core.name, core.version, core.builtin, core.error) == ("unstable-core", __version__, True, None)
    assert {"register_backends", "register_trackers"} <= set(core.hooks)
    assert core.provides["backend"] == ["transformers", "vllm", "openai"]
    jsonl = plugins.get_registry().get("tracker", "jsonl")
    assert (jsonl.dist, jsonl.plugin) == ("unstable-core", "builtins")
    assert plugins.get_plugin_manager().has_plugin("unstable-core:builtins")


def _top_level_names(path: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def test_builtin_import_strings_name_real_definitions(monkeypatch):
    """Every lazy built-in target's module defines its name (read from the source: nothing heavy is imported)."""
    monkeypatch.setenv(plugins.LOAD_ENV, "")
    lazy = [c for c in plugins.get_registry() if c.dist == "unstable-core" and isinstance(c.target, str)]
    assert {c.name for c in lazy} >= {"transformers", "vllm", "jsonl", "wandb"}
    for component in lazy:
        module, _, attr = component.target.partition(":")
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"{component.target}: no module {module}"
        assert attr in _top_level_names(spec.origin), f"{component.target}: {module} defines no {attr}"


def test_each_entry_point_is_loaded_on_its_own(site):
    site(
        "utp-multi",
        {"utp_multi_good": GOOD},
        {"good": "utp_multi_good", "gone": "utp_no_such_module"},
    )
    info = by_name(plugins.list_plugins())["utp-multi"]
    assert info.version == "0.3"
    assert info.provides == {"tracker": ["utp-tracker"]}
    assert info.hooks == ["register_trackers"]
    assert info.error == (
        "could not import 'utp_no_such_module': ModuleNotFoundError: No module named 'utp_no_such_module'"
    )
    assert plugins.load("tracker", "utp-tracker").__name__ == "Tracker"
    component = plugins.get_registry().get("tracker", "utp-tracker")
    assert (component.dist, component.plugin, component.description) == ("utp-multi", "good", "a tracker")


def test_a_broken_plugin_leaves_the_others_working(site):
    site("utp-broken", {"utp_broken": "raise RuntimeError('on purpose')\n"}, {"b": "utp_broken"})
    site("utp-good", {"utp_good": GOOD}, {"g": "utp_good"})
    infos = by_name(plugins.list_plugins())
    assert sorted(infos) == ["utp-broken", "utp-good"]
    assert infos["utp-broken"].error == "could not import 'utp_broken': RuntimeError: on purpose"
    assert infos["utp-broken"].provides == {}
    assert infos["utp-good"].error is None
    assert plugins.get_registry().names("tracker") == ["jsonl", "tensorboard", "utp-tracker", "wandb"]


def test_unknown_hook_names_are_reported(site):
    source = GOOD + (
        "\n@hookimpl\ndef register_learner(register):\n    register('x', Tracker)\n"
        "\n@hookimpl(optionalhook=True)\ndef register_someday(register):\n    pass\n"
    )
    site("utp-typo", {"utp_typo": source}, {"t": "utp_typo"})
    info = by_name(plugins.list_plugins())["utp-typo"]
    assert info.error.startswith(
        "unknown hook(s) register_learner in 't'; the hooks are: register_learners, "
    )
    assert "register_someday" not in info.error
    assert info.hooks == ["register_trackers"]
    assert info.provides == {"tracker": ["utp-tracker"]}


def test_a_hook_with_a_wrong_signature_is_rejected(site):
    source = "from unstable_core import hookimpl\n\n@hookimpl\ndef register_learners(reg):\n    pass\n"
    site("utp-badsig", {"utp_badsig": source}, {"s": "utp_badsig"})
    site("utp-good", {"utp_good": GOOD}, {"g": "utp_good"})
    infos = by_name(plugins.list_plugins())
    assert infos["utp-badsig"].error.startswith("entry point 's' was rejected: PluginValidationError: ")
    assert "reg" in infos["utp-badsig"].error
    assert infos["utp-good"].provides == {"tracker": ["utp-tracker"]}


def test_a_failing_hook_keeps_the_other_hooks(site):
    source = GOOD + (
        "\n@hookimpl\ndef register_learners(register):\n"
        "    register('utp-learner', Tracker)\n    raise ValueError('nope')\n"
    )
    site("utp-raises", {"utp_raises": source}, {"r": "utp_raises"})
    info = by_name(plugins.list_plugins())["utp-raises"]
    assert info.error == "register_learners of 'r' failed: ValueError: nope"
    assert info.provides == {"learner": ["utp-learner"], "tracker": ["utp-tracker"]}


def test_bad_registrations_are_reported_and_the_rest_kept(site):
    source = """
    from unstable_core import hookimpl

    @hookimpl
    def register_env_samplers(register):
        register("bad name", dict)
        register("utp-ok", "utp_regs:Thing")
        register("utp-lazy", "no_colon_here")
    """
    site("utp-regs", {"utp_regs": source}, {"r": "utp_regs"})
    info = by_name(plugins.list_plugins())["utp-regs"]
    assert info.provides == {"env_sampler": ["utp-ok"]}
    assert "registered a env_sampler named 'bad name'" in info.error
    assert "import string 'no_colon_here' must look like 'package.module:Name'" in info.error
    assert plugins.get_registry().get("env_sampler", "utp-ok").target == "utp_regs:Thing"  # still lazy
    with pytest.raises(
        UnstableError, match="env_sampler 'utp-ok' of utp-regs: cannot import 'utp_regs:Thing'"
    ):
        plugins.load("env_sampler", "utp-ok")


def test_bad_players_and_probes_are_reported_and_the_rest_kept(site):
    source = """
    from unstable_core import hookimpl

    @hookimpl
    def register_players(register):
        register("utp-nogames", "utp_an:P")
        register("utp-empty", "utp_an:P", games=[])
        register("utp-extra", "utp_an:P", games=["TicTacToe"], kind="player")
        register("utp-fine", "utp_an:P", "a player", games=["TicTacToe", "TicTacToe"])

    @hookimpl
    def register_probes(register):
        register("utp-probe", "utp_an:Q", "a probe", games=["TicTacToe-v0"])
    """
    site("utp-an", {"utp_an": source}, {"a": "utp_an"})
    info = by_name(plugins.list_plugins())["utp-an"]
    assert info.provides == {"player": ["utp-fine"], "probe": ["utp-probe"]}
    assert info.hooks == ["register_players", "register_probes"]
    assert "'utp-nogames': games must be a non-empty list" in info.error
    assert "'utp-empty': games must be a non-empty list" in info.error
    assert "'utp-extra': unknown option(s) kind; it takes games= only" in info.error
    assert plugins.get_registry().get("player", "utp-fine").options == {"games": ["TicTacToe"]}


def test_register_game_analyses_still_registers_players_and_probes(site):
    """The hook kept for one release: `kind=` picks the kind; a bad kind is reported, the rest kept."""
    source = """
    from unstable_core import hookimpl

    @hookimpl
    def register_game_analyses(register):
        register("utp-nokind", "utp_old:P", games=["TicTacToe"])
        register("utp-badkind", "utp_old:P", games=["TicTacToe"], kind="bot")
        register("utp-old-player", "utp_old:P", "a player", games=["TicTacToe"], kind="player")
        register("utp-old-probe", "utp_old:Q", "a probe", games=["TicTacToe"], kind="probe")
    """
    site("utp-old", {"utp_old": source}, {"o": "utp_old"})
    info = by_name(plugins.list_plugins())["utp-old"]
    assert info.provides == {"player": ["utp-old-player"], "probe": ["utp-old-probe"]}
    assert info.hooks == ["register_game_analyses"]
    assert "'utp-nokind': kind must be 'player' or 'probe', got None" in info.error
    assert "'utp-badkind': kind must be 'player' or 'probe', got 'bot'" in info.error
    assert plugins.get_registry().get("player", "utp-old-player").target == "utp_old:P"  # still lazy


def test_an_error_inside_a_running_sampler_names_it(site):
    """What a sampler raises while a collector schedules games or learns from one: one line naming the
    sampler, its kind and its distribution."""
    source = """
    from unstable_core import hookimpl
    from unstable_core.samplers import BaseEnvSampler, BaseModelSampler

    class First(BaseEnvSampler):
        def sample(self, kind="train"):
            return self.train_env_specs[0]

        def update(self, info):
            raise ValueError("no such env")

    class Ordered(BaseModelSampler):
        def sample_opponent(self, league):
            return min([league.get_current_ckpt(), None])

    @hookimpl
    def register_env_samplers(register):
        register("utp-first", First)

    @hookimpl
    def register_model_samplers(register):
        register("utp-ordered", Ordered)
    """
    from unstable_core.errors import ComponentFailed
    from unstable_core.league.league import League
    from unstable_core.runtime.actors.scheduler import GameScheduler
    from unstable_core.types import TrainEnvSpec

    site("utp-samp", {"utp_samp": source}, {"s": "utp_samp"})
    registry = plugins.get_registry()
    env_sampler = registry.load("env_sampler", "utp-first")([TrainEnvSpec("TicTacToe-v0", 2, 1)])
    scheduler = GameScheduler(env_sampler, registry.load("model_sampler", "utp-ordered")())
    league = League()
    league.add_checkpoint("ckpt-0", None, 0)
    with pytest.raises(ComponentFailed) as sampled:
        scheduler.next_train(league)
    assert str(sampled.value) == (
        "model sampler 'utp-ordered' of utp-samp failed: TypeError: '<' not supported between instances of "
        "'NoneType' and 'str'"
    )
    with pytest.raises(
        ComponentFailed, match=r"^env sampler 'utp-first' of utp-samp failed: ValueError: no such env$"
    ):
        scheduler.update(None)


def docstring_example(hook) -> str:
    """The code of a hook spec's docstring example: the indented block after its `::`."""
    return textwrap.dedent(hook.__doc__.split("::", 1)[1]).strip() + "\n"


def test_the_player_and_probe_hooks_examples_run(site):
    """`register_players`' and `register_probes`' docstring examples, installed as a plugin: the player
    takes the centre of an empty board, the probe measures a uniform policy's 1/9 and that player's 1."""
    from unstable_core import hookspecs
    from unstable_core.envs import make_env
    from unstable_core.games.players.catalogue import load_player_factory, make_player
    from unstable_core.probes import measure, player_policy, uniform_policy

    modules = {
        "utp_players_doc": docstring_example(hookspecs.register_players),
        "utp_probes_doc": docstring_example(hookspecs.register_probes),
    }
    site("utp-doc", modules, {"p": "utp_players_doc", "q": "utp_probes_doc"})
    info = by_name(plugins.list_plugins())["utp-doc"]
    assert (info.provides, info.error) == ({"player": ["centre"], "probe": ["centre-opening"]}, None)
    env = make_env("TicTacToe-v0")
    env.reset(num_players=2, seed=3)
    assert make_player("centre", "TicTacToe-v0", 3, 0).move(env, env.get_observation()[1]) == "[4]"
    assert measure("centre-opening", uniform_policy).figures["centre_mass"].value == pytest.approx(1 / 9)
    centre = player_policy(load_player_factory("centre"))
    assert measure("centre-opening", centre, "TicTacToe-v0-train").figures["centre_mass"].value == 1.0


def test_a_probe_that_is_no_probe_is_refused_when_planned(site):
    source = """
    from unstable_core import hookimpl

    class NoCheck:
        default_env = "TicTacToe-v0"

        def __call__(self, policy, env_id):
            return None

    class Needs:
        default_env = "TicTacToe-v0"

        def check(self, env_id):
            raise RuntimeError("the solver is missing")

        def __call__(self, policy, env_id):
            return None

    @hookimpl
    def register_probes(register):
        register("utp-nocheck", NoCheck, games=["TicTacToe"])
        register("utp-needs", Needs, games=["TicTacToe"])
    """
    from unstable_core.errors import ComponentFailed
    from unstable_core.probes.catalogue import plan_probes

    site("utp-pr", {"utp_pr": source}, {"p": "utp_pr"})
    with pytest.raises(ConfigError) as refused:
        plan_probes(["utp-nocheck"], option="--probe")
    assert str(refused.value) == (
        "--probe utp-nocheck: probe 'utp-nocheck' of utp-pr: NoCheck has no check; a probe implements "
        "unstable_core.probes.Probe (default_env, check(env_id), __call__(policy, env_id))"
    )
    with pytest.raises(
        ComponentFailed, match=r"^probe 'utp-needs' of utp-pr failed: RuntimeError: the solver"
    ):
        plan_probes(["utp-needs"])


def test_two_providers_of_one_name(site):
    site("utp-first", {"utp_first": GOOD}, {"f": "utp_first"})
    site("utp-second", {"utp_second": GOOD.replace("Tracker", "Other")}, {"s": "utp_second"})
    infos = by_name(plugins.list_plugins())
    expected = (
        "tracker 'utp-tracker' is registered twice: by utp-first and by utp-second; "
        "uninstall one of the two distributions"
    )
    assert infos["utp-first"].error == infos["utp-second"].error == expected
    assert infos["utp-first"].provides == {"tracker": ["utp-tracker"]}
    assert infos["utp-second"].provides == {}
    with pytest.raises(DuplicateComponentError, match="by utp-first and by utp-second"):
        plugins.load("tracker", "utp-tracker")


def test_strict_mode_raises_the_first_failure(site, monkeypatch):
    site("utp-broken", {"utp_broken": "raise RuntimeError('on purpose')\n"}, {"b": "utp_broken"})
    monkeypatch.setenv(plugins.STRICT_ENV, "1")
    with pytest.raises(PluginLoadError) as info:
        plugins.list_plugins()
    assert str(info.value) == "plugin utp-broken: could not import 'utp_broken': RuntimeError: on purpose"
    assert isinstance(info.value.__cause__, RuntimeError)


def test_strict_mode_raises_on_a_duplicate(site, monkeypatch):
    site("utp-first", {"utp_first": GOOD}, {"f": "utp_first"})
    site("utp-second", {"utp_second": GOOD}, {"s": "utp_second"})
    monkeypatch.setenv(plugins.STRICT_ENV, "true")
    with pytest.raises(
        PluginLoadError, match="^plugin utp-second: tracker 'utp-tracker' is registered twice"
    ):
        plugins.get_registry()


def test_bad_strict_value(monkeypatch):
    monkeypatch.setenv(plugins.STRICT_ENV, "sometimes")
    with pytest.raises(UnstableError, match="UNSTABLE_STRICT_PLUGINS='sometimes' is not understood"):
        plugins.strict_plugins()


def test_load_filter_normalises_names_and_rejects_unknown_ones(site, monkeypatch):
    site("utp-good", {"utp_good": GOOD}, {"g": "utp_good"})
    site("utp-other", {"utp_other": GOOD.replace("utp-tracker", "utp-tracker2")}, {"o": "utp_other"})
    monkeypatch.setenv(plugins.LOAD_ENV, " Utp_Good , unstable-core")
    assert [p.name for p in plugins.list_plugins()] == ["utp-good"]
    plugins.reset()
    monkeypatch.setenv(plugins.LOAD_ENV, "utp-good,utp-nope")
    with pytest.raises(UnstableError, match="UNSTABLE_LOAD_PLUGINS names utp-nope, which is not installed"):
        plugins.list_plugins()


def test_unknown_name_points_at_the_broken_provider(site):
    site("unstable-a2c", {"utp_a2c": "import utp_missing_dependency\n"}, {"a2c": "utp_a2c"})
    with pytest.raises(UnknownComponentError) as info:
        plugins.load("learner", "a2c")
    assert (
        "'a2c' is provided by unstable-a2c, which is installed but broken: could not import 'utp_a2c'"
        in str(info.value)
    )


def test_add_commands_calls_each_plugin_on_its_own(site):
    commands = """
    import click
    from unstable_core import hookimpl

    @hookimpl
    def register_commands(cli):
        @cli.command(name="utp-hello")
        def hello():
            click.echo("hello from a plugin")
    """
    failing = "from unstable_core import hookimpl\n\n@hookimpl\ndef register_commands(cli):\n    1 / 0\n"
    site("utp-cmd", {"utp_cmd": commands}, {"c": "utp_cmd"})
    site("utp-cmdfail", {"utp_cmdfail": failing}, {"c": "utp_cmdfail"})
    group = click.Group()
    plugins.add_commands(group)
    assert CliRunner().invoke(group, ["utp-hello"]).output == "hello from a plugin\n"
    infos = by_name(plugins.list_plugins())
    assert infos["utp-cmd"].hooks == ["register_commands"]
    assert (
        infos["utp-cmdfail"].error
        == "register_commands of 'utp-cmdfail:c' failed: ZeroDivisionError: division by zero"
    )


def test_normalize_dist():
    assert normalize_dist("Unstable_Rewards") == normalize_dist("unstable.rewards") == "unstable-rewards"
    assert normalize_dist("a--_.b") == "a-b"


# ---------------------------------------------------------------- acceptance: pip-installed, CLI in subprocesses

BONUS = '''
"""A third-party plugin of unstable: a final reward transform."""
from unstable_core import hookimpl
from unstable_core.rewards import FinalRewardTransform


class WinBonus(FinalRewardTransform):
    """Adds 0.5 to the final reward of every winning seat."""

    def __call__(self, rewards, env_id=None):
        return {pid: r + 0.5 if r > 0 else r for pid, r in rewards.items()}


class Strict(FinalRewardTransform):
    """Scales rewards; its constructor refuses a bad scale with a plain ValueError, not a ConfigError."""

    def __init__(self, scale=1.0):
        if scale <= 0:
            raise ValueError("scale must be positive")
        self.scale = scale

    def __call__(self, rewards, env_id=None):
        return {pid: r * self.scale for pid, r in rewards.items()}


@hookimpl
def register_reward_transforms(register):
    register("utp-win-bonus", "utp_bonus:WinBonus", "adds 0.5 to wins")
    register("utp-shared", WinBonus)
    register("utp-strict", Strict, "scales rewards")
'''

DUPLICATE = '''
"""A third-party plugin that claims a name utp-bonus already has."""
from unstable_core import hookimpl
from unstable_core.rewards import FinalRewardTransform


class Negate(FinalRewardTransform):
    def __call__(self, rewards, env_id=None):
        return {pid: -r for pid, r in rewards.items()}


@hookimpl
def register_reward_transforms(register):
    register("utp-shared", Negate)
    register("utp-negate", Negate)
'''

GAMES = '''
"""A third-party plugin of unstable: a game (Nim), a single-turn task, a scripted player and a probe."""
from unstable_core import hookimpl
from unstable_core.envs import Task, TaskItem
from unstable_core.games.players import ScriptedPlayer
from unstable_core.probes import Figure, ProbeResult, position_after


class Nim:
    """Two players take 1 to 3 stones in turn; who takes the last stone wins; any other move loses."""

    def reset(self, num_players, seed=None):
        self.stones, self.player, self.rewards = 5 + (seed or 0) % 3, 0, None

    def get_observation(self):
        return self.player, f"{self.stones} stones are left. Take [1], [2] or [3]."

    def step(self, action):
        take = action.strip("[] ")
        if take not in ("1", "2", "3") or int(take) > self.stones:
            self.rewards = {self.player: -1.0, 1 - self.player: 1.0}
            return True, {"invalid": take}
        self.stones -= int(take)
        if self.stones == 0:
            self.rewards = {self.player: 1.0, 1 - self.player: -1.0}
            return True, {}
        self.player = 1 - self.player
        return False, {}

    def close(self):
        return self.rewards, {0: {"reason": "game over"}, 1: {"reason": "game over"}}


class Capitals(Task):
    size = 2

    def item(self, index):
        return [TaskItem("The capital of France?", "Paris"), TaskItem("The capital of Italy?", "Rome")][index]


@hookimpl
def register_envs(register):
    register("UtpNim-v0", Nim, "take 1-3 stones; the last one wins", players=2)
    register("utp-capitals", "utp_games:Capitals", "name the capital", task=True)


class PerfectTaker(ScriptedPlayer):
    """Leaves the opponent a multiple of 4 stones where it can (else takes 1)."""

    def __init__(self, env_id, seed):
        self.env_id = env_id

    def move(self, env, observation):
        return f"[{int(observation.split()[0]) % 4 or 1}]"


class Takes:
    """The policy's mass on the winning take at the first move of games seeded 0, 1, 2 (5, 6, 7 stones)."""

    default_env = "UtpNim-v0"

    def check(self, env_id):
        pass

    def __call__(self, policy, env_id):
        answers = {f"[{k}]": (f"[{k}]", f"[take {k}]") for k in (1, 2, 3)}
        positions = [position_after(str(seed), env_id, answers, seed=seed) for seed in (0, 1, 2)]
        found = policy(positions)
        right = [probs[f"[{int(p.observation.split()[0]) % 4}]"] for p, probs in zip(positions, found)]
        return ProbeResult("utp-nim-takes", env_id, {"right_mass": Figure.mean(right)})


class SpelledTaker(PerfectTaker):
    """PerfectTaker, its move written as `[take N]`: a spelling the probe lists, not its answer key."""

    def move(self, env, observation):
        return f"[take {int(observation.split()[0]) % 4 or 1}]"


class Broken(ScriptedPlayer):
    def __init__(self, env_id, seed):
        pass

    def move(self, env, observation):
        return {}["[1]"]


@hookimpl
def register_players(register):
    register("utp-nim-perfect", PerfectTaker, "leaves a multiple of 4", games=["UtpNim"])
    register("utp-nim-spelled", SpelledTaker, "leaves a multiple of 4, spelled out", games=["UtpNim"])
    register("utp-nim-broken", Broken, "raises", games=["UtpNim"])


@hookimpl
def register_probes(register):
    register("utp-nim-takes", "utp_games:Takes", "mass on the winning take", games=["UtpNim-v0"])
'''

LEGACY = '''
"""A plugin written against the hook kept for one release, as the guide showed it then."""
from unstable_core import hookimpl
from unstable_core.games.analysis import Figure, Position, ProbeResult, ScriptedPlayer


class FirstCell(ScriptedPlayer):
    def __init__(self, env_id, seed):
        self.env_id = env_id

    def move(self, env, observation):
        board = [cell for row in env.state.game_state["board"] for cell in row]
        return f"[{board.index('')}]"


class CornerMass:
    default_env = "TicTacToe-v0"

    def __call__(self, policy, env_id):
        from unstable_core.envs.catalogue import make_env

        env = make_env(env_id)
        env.reset(num_players=2, seed=0)
        pid, observation = env.get_observation()
        answers = {f"[{c}]": (f"[{c}]",) for c in range(9)}
        (probs,) = policy([Position("opening", env_id, env, pid, observation, answers)])
        return ProbeResult("utp-corner", env_id, {"corner_mass": Figure.of_exact(probs["[0]"], 1)})


@hookimpl
def register_game_analyses(register):
    register("utp-first-cell", FirstCell, "the first empty cell", games=["TicTacToe"], kind="player")
    register("utp-corner", CornerMass, "mass on cell 0", games=["TicTacToe"], kind="probe")
'''

PROJECTS = {
    "unstable-testplug-bonus": ("utp_bonus", BONUS),
    "unstable-testplug-games": ("utp_games", GAMES),
    "unstable-testplug-broken": ("utp_broken", "raise RuntimeError('utp broken on purpose')\n"),
    "unstable-testplug-dup": ("utp_dup", DUPLICATE),
    "unstable-testplug-legacy": ("utp_legacy", LEGACY),
}
OURS = ",".join(PROJECTS)


def write_project(folder: Path, dist: str, module: str, source: str) -> None:
    """A buildable project: pyproject.toml with an `unstable` entry point, and its one module."""
    folder.mkdir()
    (folder / f"{module}.py").write_text(source)
    (folder / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "1.2.3"

        [project.entry-points.unstable]
        {module} = "{module}"

        [tool.setuptools]
        py-modules = ["{module}"]
        """)
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The three throw-away distributions, pip-installed once into a folder; removed at the end."""
    root = tmp_path_factory.mktemp("third-party")
    target = root / "site"
    folders = []
    for dist, (module, source) in PROJECTS.items():
        write_project(root / dist, dist, module, source)
        folders.append(str(root / dist))
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    try:
        result = subprocess.run(
            [*pip, "--no-deps", "--no-build-isolation", "--no-cache-dir", "--target", str(target), *folders],
            capture_output=True,
            text=True,
            env={**os.environ, "PIP_NO_INDEX": "1"},
            timeout=120,
        )
        assert result.returncode == 0, f"pip install failed: {result.stderr}"
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)
    assert not target.exists()


def run_cli(site_dir: Path | None, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m unstable_core ARGS` with the throw-away distributions importable and wide output."""
    base = {k: v for k, v in os.environ.items() if k not in (plugins.LOAD_ENV, plugins.STRICT_ENV)}
    if site_dir is not None:
        base["PYTHONPATH"] = os.pathsep.join([str(site_dir), *filter(None, [base.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env={**base, "COLUMNS": "250", **env},
        timeout=60,
    )


def ours(listing: str) -> dict[str, dict]:
    """The entries of a `plugins --json` listing that belong to the throw-away distributions."""
    return {p["name"]: p for p in json.loads(listing) if p["name"].startswith("unstable-testplug-")}


def test_third_party_plugins_are_listed(installed):
    result = run_cli(installed, "-m", "unstable_core", "plugins", "--json")
    assert result.returncode == 0, result.stderr
    listed = ours(result.stdout)
    conflict = (
        "reward_transform 'utp-shared' is registered twice: by unstable-testplug-bonus and by "
        "unstable-testplug-dup; uninstall one of the two distributions"
    )
    assert listed == {
        "unstable-testplug-bonus": {
            "name": "unstable-testplug-bonus",
            "version": "1.2.3",
            "hooks": ["register_reward_transforms"],
            "provides": {"reward_transform": ["utp-win-bonus", "utp-shared", "utp-strict"]},
            "components": [
                {"kind": "reward_transform", "name": "utp-win-bonus", "description": "adds 0.5 to wins"},
                {  # registered without a description: its docstring's
                    "kind": "reward_transform",
                    "name": "utp-shared",
                    "description": "Adds 0.5 to the final reward of every winning seat.",
                },
                {"kind": "reward_transform", "name": "utp-strict", "description": "scales rewards"},
            ],
            "error": conflict,
        },
        "unstable-testplug-broken": {
            "name": "unstable-testplug-broken",
            "version": "1.2.3",
            "hooks": [],
            "provides": {},
            "components": [],
            "error": "could not import 'utp_broken': RuntimeError: utp broken on purpose",
        },
        "unstable-testplug-dup": {
            "name": "unstable-testplug-dup",
            "version": "1.2.3",
            "hooks": ["register_reward_transforms"],
            "provides": {"reward_transform": ["utp-negate"]},
            "components": [{"kind": "reward_transform", "name": "utp-negate", "description": ""}],
            "error": conflict,
        },
        "unstable-testplug-games": {
            "name": "unstable-testplug-games",
            "version": "1.2.3",
            "hooks": ["register_envs", "register_players", "register_probes"],
            "provides": {
                "env": ["UtpNim-v0", "utp-capitals"],
                "player": ["utp-nim-perfect", "utp-nim-spelled", "utp-nim-broken"],
                "probe": ["utp-nim-takes"],
            },
            "components": [
                {"kind": "env", "name": "UtpNim-v0", "description": "take 1-3 stones; the last one wins"},
                {"kind": "env", "name": "utp-capitals", "description": "name the capital"},
                {"kind": "player", "name": "utp-nim-perfect", "description": "leaves a multiple of 4"},
                {
                    "kind": "player",
                    "name": "utp-nim-spelled",
                    "description": "leaves a multiple of 4, spelled out",
                },
                {"kind": "player", "name": "utp-nim-broken", "description": "raises"},
                {"kind": "probe", "name": "utp-nim-takes", "description": "mass on the winning take"},
            ],
        },
        "unstable-testplug-legacy": {
            "name": "unstable-testplug-legacy",
            "version": "1.2.3",
            "hooks": ["register_game_analyses"],
            "provides": {"player": ["utp-first-cell"], "probe": ["utp-corner"]},
            "components": [
                {"kind": "player", "name": "utp-first-cell", "description": "the first empty cell"},
                {"kind": "probe", "name": "utp-corner", "description": "mass on cell 0"},
            ],
        },
    }


def test_third_party_games_and_tasks_are_listed_and_played(installed):
    listing = run_cli(installed, "-m", "unstable_core", "envs", "utp", "--json")
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout) == [
        {"id": "UtpNim-v0", "kind": "game", "players": [2], "provider": "unstable-testplug-games",
         "description": "take 1-3 stones; the last one wins"},
        {"id": "utp-capitals", "kind": "task", "players": [1], "provider": "unstable-testplug-games",
         "description": "name the capital"},
    ]  # fmt: skip
    tasks = run_cli(installed, "-m", "unstable_core", "envs", "--tasks")
    assert (
        "utp-capitals" in tasks.stdout and "UtpNim-v0" not in tasks.stdout and "arithmetic-1" in tasks.stdout
    )
    script = textwrap.dedent("""
        import json
        from unstable_core.envs.catalogue import check_env_id, make_env

        env = make_env("UtpNim-v0")
        env.reset(num_players=2, seed=0)
        env.step("[3]")
        done, _ = env.step("[2]")
        capitals = make_env("utp-capitals")
        capitals.reset(num_players=1, seed=1)
        capitals.step("It is \\\\boxed{rome}.")
        try:
            check_env_id("UtpNim-v0", 3)
        except Exception as exc:
            players = str(exc)
        print(json.dumps([done, env.close()[0], capitals.close()[0], players]))
    """)
    played = run_cli(installed, "-c", script, UNSTABLE_LOAD_PLUGINS="unstable-testplug-games")
    assert played.returncode == 0, played.stderr
    assert json.loads(played.stdout) == [
        True, {"0": -1.0, "1": 1.0}, {"0": 1.0}, "--env UtpNim-v0:3: UtpNim-v0 is played by 2 players"
    ]  # fmt: skip


def test_third_party_players_and_probes_play_and_measure(installed):
    """A plugin's scripted player plays its game through the game loop and is an `unstable eval` player;
    its probe measures that player (1.0) and the uniform policy (1/3), from Python and from `unstable eval
    --probe`; a probe or player on a game it does not cover is one line naming the known ones."""
    script = textwrap.dedent("""
        import asyncio, json
        from unstable_core.errors import ConfigError, UnstableError
        from unstable_core.games.players.catalogue import check_players, load_player_factory, make_player
        from unstable_core.probes import measure, player_policy, uniform_policy
        from unstable_core.probes.catalogue import plan_probes
        from unstable_core.games.loop import play_game
        from unstable_core.inference.base import SamplingParams
        from unstable_core.types import GameSpec, PlayerSpec

        spec = GameSpec(0, "UtpNim-v0", 1, [PlayerSpec(0, "utp-nim-perfect"), PlayerSpec(1, "utp-nim-perfect")])
        players = {pid: make_player("utp-nim-perfect", "UtpNim-v0", 1, pid) for pid in (0, 1)}
        result = asyncio.run(play_game(spec, players, {0: None, 1: None}, lora_paths={0: None, 1: None},
                                       policy_versions={0: -1, 1: -1}, params=SamplingParams()))
        errors = []
        for call in (lambda: check_players([("utp-nim-perfect", "TicTacToe-v0-train")]),
                     lambda: measure("utp-nim-takes", uniform_policy, "KuhnPoker-v0-train")):
            try:
                call()
            except ConfigError as exc:
                errors.append(str(exc))
        (planned,) = plan_probes(["utp-nim-takes"])
        spelled = measure(planned, player_policy(load_player_factory("utp-nim-spelled")))
        try:
            measure(planned, player_policy(load_player_factory("utp-nim-broken")))
        except UnstableError as exc:
            errors.append(str(exc))
        print(json.dumps([result.info.final_rewards, measure(planned, uniform_policy).to_dict()["figures"],
                          spelled.figures["right_mass"].value, errors]))
    """)
    played = run_cli(installed, "-c", script, UNSTABLE_LOAD_PLUGINS="unstable-testplug-games")
    assert played.returncode == 0, played.stderr
    rewards, figures, spelled, errors = json.loads(played.stdout)
    assert rewards == {"0": 1.0, "1": -1.0}  # 6 stones: the first player takes 2 and wins
    assert figures["right_mass"]["value"] == pytest.approx(1 / 3) and figures["right_mass"]["n"] == 3
    assert spelled == 1.0  # `[take 2]` is a spelling of the answer `[2]`
    assert errors[0].startswith(
        "opponent 'utp-nim-perfect' cannot play TicTacToe-v0-train: it plays UtpNim (any variant); "
    )
    assert errors[1].startswith(
        "probe 'utp-nim-takes' cannot measure KuhnPoker-v0-train: it measures UtpNim-v0 only;"
    )
    assert "kuhn-exploitability (KuhnPoker)" in errors[1] and "\n" not in "".join(errors)
    assert errors[2] == "player 'utp-nim-broken' of unstable-testplug-games failed: KeyError: '[1]'"

    evaluated = run_cli(installed, "-m", "unstable_core", "eval", "utp-nim-perfect", "--probe", "utp-nim-takes",
                        "--json", "--out", str(installed.parent / "eval"), UNSTABLE_LOAD_PLUGINS="unstable-testplug-games")  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    (probed,) = json.loads(evaluated.stdout)["probe_results"]
    assert (probed["model"], probed["probe"], probed["env_id"]) == (
        "utp-nim-perfect",
        "utp-nim-takes",
        "UtpNim-v0",
    )
    assert probed["figures"]["right_mass"]["value"] == 1.0
    refused = run_cli(installed, "-m", "unstable_core", "eval", "random", "--probe", "utp-nim-takes",
                      UNSTABLE_LOAD_PLUGINS="unstable-testplug-games")  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "opponent 'random' cannot play UtpNim-v0" in refused.stderr


def test_a_plugin_written_against_register_game_analyses_still_plays_and_measures(installed):
    """The hook and the import path kept for one release: the old plugin's player plays `unstable eval`'s
    probe positions and its probe (no `check`, as the old guide wrote them) measures it."""
    evaluated = run_cli(installed, "-m", "unstable_core", "eval", "utp-first-cell", "--probe", "utp-corner",
                        "--json", "--out", str(installed.parent / "legacy"), UNSTABLE_LOAD_PLUGINS="unstable-testplug-legacy")  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    (probed,) = json.loads(evaluated.stdout)["probe_results"]
    assert (probed["model"], probed["probe"], probed["env_id"]) == (
        "utp-first-cell",
        "utp-corner",
        "TicTacToe-v0",
    )
    assert probed["figures"]["corner_mass"]["value"] == 1.0  # the first empty cell of the opening: 0


def test_an_error_inside_a_running_plugin_names_it_and_leaves_no_folder(installed):
    out = installed.parent / "broken-eval"
    failed = run_cli(installed, "-m", "unstable_core", "eval", "utp-nim-broken", "--probe", "utp-nim-takes",
                     "--out", str(out), UNSTABLE_LOAD_PLUGINS="unstable-testplug-games")  # fmt: skip
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr.splitlines()[-1] == (
        "Error: player 'utp-nim-broken' of unstable-testplug-games failed: KeyError: '[1]'"
    )
    assert "Traceback" not in failed.stderr and not out.exists()


def test_third_party_table(installed):
    """A row per component with the description its plugin registered, under its package and version."""
    result = run_cli(installed, "-m", "unstable_core", "plugins", UNSTABLE_LOAD_PLUGINS=OURS)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    (broken,) = [line for line in lines if line.startswith("│ unstable-testplug-broken ")]
    assert (
        "1.2.3" in broken and "could not import 'utp_broken': RuntimeError: utp broken on purpose" in broken
    )
    (bonus,) = [line for line in lines if line.startswith("│ unstable-testplug-bonus ")]
    assert "1.2.3" in bonus and "reward_transform" in bonus and "utp-win-bonus" in bonus
    assert "adds 0.5 to wins" in bonus
    (nim,) = [line for line in lines if "UtpNim-v0" in line]
    assert "take 1-3 stones; the last one wins" in nim
    assert "unstable-core" not in result.stdout


def test_third_party_components_resolve_by_name(installed):
    script = textwrap.dedent("""
        import json
        from unstable_core import plugins
        from unstable_core.registry import DuplicateComponentError
        from unstable_core.rewards import FinalRewardTransform

        plugins.reset()
        registry = plugins.get_registry()
        bonus = registry.load("reward_transform", "utp-win-bonus")
        negate = registry.load("reward_transform", "utp-negate")
        try:
            registry.load("reward_transform", "utp-shared")
            shared = "resolved"
        except DuplicateComponentError as exc:
            shared = str(exc)
        print(json.dumps({
            "bonus": [issubclass(bonus, FinalRewardTransform), bonus()({0: 1.0, 1: -1.0, 2: 0.0})],
            "negate": negate()({0: 1.0, 1: -1.0}),
            "dist": registry.get("reward_transform", "utp-win-bonus").dist,
            "shared": shared,
        }))
    """)
    result = run_cli(installed, "-c", script)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "bonus": [True, {"0": 1.5, "1": -1.0, "2": 0.0}],
        "negate": {"0": -1.0, "1": 1.0},
        "dist": "unstable-testplug-bonus",
        "shared": "reward_transform 'utp-shared' is registered twice: by unstable-testplug-bonus and by "
        "unstable-testplug-dup; uninstall one of the two distributions",
    }


@pytest.mark.parametrize(
    ("transform", "expected"),
    [
        ("utp-strict:scale=-1", "--final-transform utp-strict: ValueError: scale must be positive; utp-strict takes scale"),
        ("utp-strict:alpha=1", "--final-transform utp-strict: unknown option alpha; utp-strict takes scale"),
        ("utp-strict:scale=abc", "--final-transform utp-strict: TypeError: '<=' not supported between instances of 'str' and 'int'; utp-strict takes scale"),
    ],
    ids=["constructor-raises-valueerror", "unknown-option", "bad-value"],
)  # fmt: skip
def test_a_third_party_constructor_that_raises_ends_in_one_line(installed, tmp_path, transform, expected):
    """Whatever a plugin's constructor raises, not only a ConfigError, is one line and exit status 2 before
    anything starts, naming the option, the registered name and the keys it takes."""
    result = run_cli(
        installed, "-m", "unstable_core", "run", "--runs-dir", str(tmp_path), "--final-transform", transform
    )
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [f"Error: {expected}"])
    assert list(tmp_path.iterdir()) == []


def test_load_filter_selects_distributions(installed):
    only = run_cli(
        installed, "-m", "unstable_core", "plugins", "--json", UNSTABLE_LOAD_PLUGINS="unstable-testplug-bonus"
    )
    assert only.returncode == 0, only.stderr
    (entry,) = json.loads(only.stdout)
    assert entry["name"] == "unstable-testplug-bonus"
    assert "error" not in entry  # the duplicate is not loaded, so there is no conflict

    none = run_cli(installed, "-m", "unstable_core", "plugins", "--json", UNSTABLE_LOAD_PLUGINS="")
    assert (none.returncode, json.loads(none.stdout)) == (0, [])
    text = run_cli(installed, "-m", "unstable_core", "plugins", UNSTABLE_LOAD_PLUGINS="")
    assert text.returncode == 0
    assert text.stdout.startswith("No plugin is installed")
    builtins = run_cli(
        installed, "-m", "unstable_core", "plugins", "--json", "--all", UNSTABLE_LOAD_PLUGINS=""
    )
    assert [p["name"] for p in json.loads(builtins.stdout)] == ["unstable-core"]


def test_strict_mode_fails_the_listing_with_one_line(installed):
    result = run_cli(
        installed,
        "-m",
        "unstable_core",
        "plugins",
        UNSTABLE_LOAD_PLUGINS=OURS,
        UNSTABLE_STRICT_PLUGINS="1",
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "Error: plugin unstable-testplug-broken: could not import 'utp_broken': RuntimeError: utp broken on purpose"
    )


def test_listing_and_import_stay_light(installed):
    probe = "import sys, json; print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"
    bare = run_cli(installed, "-c", "import unstable_core; " + probe.format(heavy=HEAVY))
    assert (bare.returncode, bare.stdout.strip()) == (0, "[]"), bare.stderr
    listing = textwrap.dedent(f"""
        import sys
        from unstable_core.cli.main import main
        sys.argv = ["unstable", "plugins", "--all"]
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, exc.code
        {probe.format(heavy=HEAVY)}
    """)
    result = run_cli(installed, "-c", listing, UNSTABLE_LOAD_PLUGINS=OURS)
    assert result.returncode == 0, result.stderr
    assert "unstable-testplug-bonus" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_version():
    script = Path(sys.executable).parent / "unstable"
    if not script.exists():
        pytest.skip("the `unstable` console script is not installed next to this Python")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, f"unstable, version {__version__}\n")


def test_a_textarena_env_class_registered_as_it_is_gives_text_observations(site):
    """TextArena's `Env` classes observe in lists of messages; `textarena.make` wraps its ids in an
    observation wrapper, and so does a registered game now (every game of one failed: "gave a list
    observation, not text"). `wrappers=` chooses the wrappers, as TextArena's `register` takes them."""
    from unstable_core.envs.catalogue import make_env

    site(
        "utp-ta",
        {
            "utp_ta": """
            from unstable_core import hookimpl

            TICTACTOE = "textarena.envs.TicTacToe.env:TicTacToeEnv"

            @hookimpl
            def register_envs(register):
                register("utp-tictactoe", TICTACTOE, players=2)
                register("utp-tictactoe-board", TICTACTOE, players=2, wrappers=[
                    "textarena.wrappers:GameMessagesAndCurrentBoardObservationWrapper",
                    "textarena.wrappers:ActionFormattingWrapper",
                ])
                register("utp-tictactoe-bare", TICTACTOE, players=2, wrappers=[])
                register("utp-bad-wrappers", TICTACTOE, players=2, wrappers="textarena.wrappers:X")
            """
        },
        {"utp_ta": "utp_ta"},
    )
    info = by_name(plugins.list_plugins())["utp-ta"]
    assert info.error == (
        "utp-ta's 'utp-bad-wrappers': wrappers must be a list of wrapper classes or import strings, "
        "got 'textarena.wrappers:X'"
    )
    observed = {}
    for env_id in ("utp-tictactoe", "utp-tictactoe-board", "utp-tictactoe-bare"):
        env = make_env(env_id)
        env.reset(num_players=2, seed=0)
        env.step("[4]")
        observed[env_id] = env.get_observation()
    for env_id in ("utp-tictactoe", "utp-tictactoe-board"):
        pid, text = observed[env_id]
        assert pid == 1 and isinstance(text, str) and "Tic Tac Toe" in text and " 3 | O | 5 " in text
    assert "[Player 0] [4]" in observed["utp-tictactoe"][1]  # the LLM wrapper's log of messages
    assert "[GAME]" not in observed["utp-tictactoe-board"][1]  # the wrappers asked for instead
    assert isinstance(observed["utp-tictactoe-bare"][1], list)  # wrappers=[]: TextArena's own messages


def test_an_env_id_textarena_has_or_bad_env_options_are_refused(site):
    from unstable_core.envs.catalogue import check_env_id, make_env

    site(
        "utp-envs",
        {
            "utp_envs": """
            from unstable_core import hookimpl

            def nim():
                return object()

            @hookimpl
            def register_envs(register):
                register("TicTacToe-v0", nim, players=2)
                register("utp-three", nim, players=[3, 2, 3])
                register("utp-bad-players", nim, players=0)
                register("utp-bad-task", nim, task=True, players=2)
                register("utp-bad-option", nim, colour="red")
            """
        },
        {"utp_envs": "utp_envs"},
    )
    info = by_name(plugins.list_plugins())["utp-envs"]
    assert info.provides == {"env": ["TicTacToe-v0", "utp-three"]}
    assert info.error == (
        "utp-envs's 'utp-bad-players': players must be an int >= 1 or a list of them, got 0; "
        "utp-envs's 'utp-bad-task': a task has one player, got players=2; "
        "utp-envs's 'utp-bad-option': unknown option(s) colour; an env takes players=, task= and wrappers="
    )
    assert plugins.get_registry().get("env", "utp-three").options == {"players": [2, 3], "task": False}
    with pytest.raises(ConfigError, match="'TicTacToe-v0' is registered by utp-envs and by TextArena"):
        make_env("TicTacToe-v0")
    with pytest.raises(ConfigError, match="is played by 2, 3 players"):
        check_env_id("utp-three", 4)
    with pytest.raises(UnstableError, match="a tracker takes no options, got players"):
        from unstable_core.registry import check_options

        check_options("tracker", {"players": 2}, "x")


def test_a_plugins_template_is_the_one_the_game_loop_renders(site):
    """Before, `get_template` read the built-in templates only: a registered one was listed but unusable."""
    from unstable_core.games.templates import answer_prefix, get_template

    site(
        "utp-templates",
        {
            "utp_templates": """
                from unstable_core import hookimpl

                def short(observation, tokenizer):
                    return f"{observation} ->"

                short.answer_prefix = ">"

                @hookimpl
                def register_templates(register):
                    register("utp-short", short, "the observation and an arrow")
            """
        },
        {"utp_templates": "utp_templates"},
    )
    template = get_template("utp-short")
    assert (template("x", None), answer_prefix(template)) == ("x ->", ">")
    with pytest.raises(UnstableError, match="unknown prompt template 'nope'; use one of: .*utp-short"):
        get_template("nope")
