"""The plugin contract of unstable: every hook a plugin may implement.

A plugin is a module with `@hookimpl` functions, published through an entry point in the group
`unstable`::

    [project.entry-points.unstable]
    my_rewards = "my_rewards"

Each `register_*` hook receives a `register(name, target, description="")` callback. `target` is the
class (or factory) itself, or an import string `"package.module:Name"` that is imported only when the
component is used, so that `unstable plugins` never imports torch. A name is letters, digits, '-', '_'
or '.', and is unique per kind across all installed plugins: a second provider is an error naming both
distributions. A plugin whose import or hook fails is listed with its error by `unstable plugins`
while the others keep working (`UNSTABLE_STRICT_PLUGINS=1` raises instead); a `@hookimpl` whose name
matches no hook below is reported, unless marked `@hookimpl(optionalhook=True)`.
`UNSTABLE_LOAD_PLUGINS=dist1,dist2` loads only those distributions (empty: none).
"""

from __future__ import annotations

from typing import Any, Protocol

import pluggy

PROJECT_NAME = "unstable"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class Register(Protocol):
    """The callback a `register_*` hook is given: `register(name, target, description="")`
    (`register_envs` also takes `players=`, `task=` and `wrappers=`; `register_players` and
    `register_probes` take `games=`)."""

    def __call__(self, name: str, target: Any, description: str = "", **options: Any) -> None: ...


@hookspec
def register_learners(register: Register) -> None:
    """Register learner classes (subclasses of `unstable_core.learners.BaseLearner`).

    Selected with `unstable run --learner NAME`::

        @hookimpl
        def register_learners(register):
            register("reinforce", "unstable_reinforce.learner:REINFORCELearner",
                     "policy gradient on the sampled tokens")
    """


@hookspec
def register_env_samplers(register: Register) -> None:
    """Register environment samplers (subclasses of `unstable_core.samplers.BaseEnvSampler`).

    An env sampler picks which environment the next game is played in::

        @hookimpl
        def register_env_samplers(register):
            register("random", "unstable_samplers.env:UniformRandomEnvSampler")
    """


@hookspec
def register_model_samplers(register: Register) -> None:
    """Register opponent samplers (subclasses of `unstable_core.samplers.BaseModelSampler`).

    A model sampler picks the opponent of the learner's current checkpoint.
    Selected with `unstable run --sampler NAME`::

        @hookimpl
        def register_model_samplers(register):
            register("mirror", "unstable_samplers.model:MirrorModelSampler")
    """


@hookspec
def register_reward_transforms(register: Register) -> None:
    """Register reward transforms: subclasses of the three stage classes of `unstable_core.rewards`
    (`FinalRewardTransform`, `StepRewardTransform`, `SamplingRewardTransform`)::

        @hookimpl
        def register_reward_transforms(register):
            register("win-bonus", "my_rewards:WinBonus", "adds 1 to every win")
    """


@hookspec
def register_trackers(register: Register) -> None:
    """Register metric trackers (subclasses of `unstable_core.trackers.base.BaseTracker`).

    Example::

        @hookimpl
        def register_trackers(register):
            register("jsonl", "unstable_core.trackers.jsonl:JSONLTracker")
    """


@hookspec
def register_backends(register: Register) -> None:
    """Register inference backends (subclasses of `unstable_core.inference.InferenceBackend`).

    Example::

        @hookimpl
        def register_backends(register):
            register("transformers", "unstable_core.inference.hf:TransformersBackend")
    """


@hookspec
def register_templates(register: Register) -> None:
    """Register prompt templates: callables `(observation, tokenizer) -> prompt text`.

    Example::

        @hookimpl
        def register_templates(register):
            register("qwen3-zs", "unstable_core.games.templates:qwen3_zs")
    """


@hookspec
def register_envs(register: Register) -> None:
    """Register games and single-turn tasks, selected by id as `--env ID`, `--eval-task ID`, `eval --task ID`.

    A game is a TextArena-compatible env class or factory `() -> env` (`reset(num_players, seed)`,
    `get_observation()` giving text, `step(action)`, `close()`), registered with the player counts it
    supports. A TextArena `Env` subclass is played behind TextArena's LLM observation wrapper, as
    `textarena.make` plays its plain ids, unless `wrappers=[...]` (classes or import strings, applied in
    order, as TextArena's `register` takes them) says which.
    A task is a factory `() -> unstable_core.envs.Task` (prompt/answer items and an answer checker), played
    as a one-turn, one-player game: reward +1 for a correct answer, -1 otherwise. Ids are unique across
    plugins and TextArena; `unstable envs` lists them with the distribution that provides them::

        @hookimpl
        def register_envs(register):
            register("Nim-v0", "my_games.nim:NimEnv", "take 1-3 stones; the last one wins", players=2)
            register("capitals", "my_tasks:capitals", "name the capital", task=True)
    """


@hookspec
def register_players(register: Register) -> None:
    """Register scripted players: opponents played by code, for the games they name.

    `register(name, factory, description="", games=[...])`. `factory(env_id, seed)` returns a
    `unstable_core.games.players.ScriptedPlayer`, whose `move(env, observation)` returns the move of the
    seat it plays, written as the game reads it, from the real env (its state) and the seat's observation.
    The seed is drawn from the game's seed and the seat, so a replayed game replays its moves. `games`: game
    names (an env id up to `-v`: every variant, e.g. `"TicTacToe"`) or exact env ids. A player is an
    opponent wherever `random` is one (`unstable eval --opponent NAME`, `--fixed-opponent NAME`, an eval
    env's opponent), and a policy that probes measure (`unstable eval NAME --probe ...`); a name or a game
    it does not cover is refused before anything starts. `unstable plugins` lists it as a `player`.
    Example (TicTacToe's centre, else a random empty cell)::

        import random

        from unstable_core import hookimpl
        from unstable_core.games.players import ScriptedPlayer


        class Centre(ScriptedPlayer):
            def __init__(self, env_id, seed):  # seed: from the game's seed and the seat
                self.rng = random.Random(seed)

            def move(self, env, observation):  # the real env, and what the seat sees
                board = [cell for row in env.state.game_state["board"] for cell in row]
                empty = [i for i, cell in enumerate(board) if not cell]
                return "[4]" if 4 in empty else f"[{self.rng.choice(empty)}]"


        @hookimpl
        def register_players(register):
            register("centre", Centre, "the centre, else a random empty cell", games=["TicTacToe"])
    """


@hookspec
def register_probes(register: Register) -> None:
    """Register probes: exact yardsticks of a policy at fixed positions of the games they name.

    `register(name, probe_class, description="", games=[...])`. The class implements
    `unstable_core.probes.Probe` and is built with no arguments, once, when a run or an evaluation is
    planned: its `check(env_id)` raises a ConfigError for what it lacks there (a package), before anything
    starts, and its `default_env` is the env it measures when none is given (`--probe NAME`, not
    `NAME:ENV`). `probe(policy, env_id)` drives real envs to its positions (`probes.position_after`),
    asks `policy` for each legal move's probability there (a model's, a scripted player's, a fixed one)
    and returns a `ProbeResult`. `unstable eval --probe NAME`, `unstable run --eval-probe NAME` and
    `unstable_core.eval.probes.run_probe` run it; `unstable plugins` lists it as a `probe`. Example (the
    probability of the centre on an empty TicTacToe board)::

        from unstable_core import hookimpl
        from unstable_core.probes import Figure, ProbeResult, position_after


        class CentreOpening:
            default_env = "TicTacToe-v0"  # measured when no env is given

            def check(self, env_id):  # raise a ConfigError for what is missing
                pass

            def __call__(self, policy, env_id):
                cells = {f"[{i}]": (f"[{i}]",) for i in range(9)}  # each legal move: its spellings
                (probs,) = policy([position_after("opening", env_id, cells)])
                figures = {"centre_mass": Figure.of_exact(probs["[4]"], 1)}
                return ProbeResult("centre-opening", env_id, figures, {"centre_mass": {"uniform": 1 / 9}})


        @hookimpl
        def register_probes(register):
            register("centre-opening", CentreOpening, "mass on the centre", games=["TicTacToe"])
    """


@hookspec
def register_game_analyses(register: Register) -> None:
    """Deprecated (kept for one release): `register(..., games=[...], kind="player")` registers a scripted
    player as `register_players` does, `kind="probe"` a probe as `register_probes` does; use those."""


@hookspec
def register_commands(cli: Any) -> None:
    """Add subcommands to the `unstable` click group.

    Example::

        @hookimpl
        def register_commands(cli):
            @cli.command()
            def hello():
                click.echo("hi")
    """
