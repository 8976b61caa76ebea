"""The built-in `random` opponent: legal moves only, uniform, seeded, refused where a game lists no moves,
and a full game against the tiny model through the real game loop and backend."""

import asyncio
import sys
from collections import Counter

import pytest
import textarena

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError
from unstable_core.games.loop import play_game
from unstable_core.games.players.legal_moves import LEGAL_MOVES, supported_games
from unstable_core.games.players.random_move import RandomPlayer, check_random_supported
from unstable_core.inference.base import SamplingParams
from unstable_core.types import GameSpec, PlayerSpec

SUPPORTED = {  # one variant per game; VARIANTS adds those that hide their moves or change the board
    "TicTacToe": "TicTacToe-v0-train",
    "ReverseTicTacToe": "ReverseTicTacToe-v0-train",
    "KuhnPoker": "KuhnPoker-v0-medium-train",
    "ConnectFour": "ConnectFour-v0-train",
    "Nim": "Nim-v0-large-train",
    "Othello": "Othello-v0-tiny-train",
    "Chess": "Chess-v0-train",
    "WildTicTacToe": "WildTicTacToe-v0-train",
    "SimpleTak": "SimpleTak-v0-train",
    "PigDice": "PigDice-v0-50-train",
    "Crusade": "Crusade-v0-train",
    "GameOfPureStrategy": "GameOfPureStrategy-v0-train",
    "HighSociety": "HighSociety-v0-train",
    "IteratedRockPaperScissors": "IteratedRockPaperScissors-v0-train",
    "IteratedMatchingPennies": "IteratedMatchingPennies-v0-train",
    "Briscola": "Briscola-v0-train",
    "Snake": "Snake-v0-train",
    "Surround": "Surround-v0-train",
}
VARIANTS = ["Othello-v0-hard-train", "Chess-v0-blind-train", "ConnectFour-v0-large-train"]


def make_or_skip(env_id: str) -> None:
    """Skip where TextArena 0.7.4 cannot load the env on this Python (ReverseTicTacToe and Chess use
    Python 3.12 f-string syntax)."""
    try:
        textarena.make(env_id)
    except SyntaxError as exc:
        pytest.skip(f"TextArena's {env_id} does not load on Python {sys.version.split()[0]}: {exc.msg}")


def random_vs_random(env_id: str, seed: int):
    """One game of two random players through the real game loop."""
    spec = GameSpec(0, env_id, seed, [PlayerSpec(0, "random"), PlayerSpec(1, "random")])
    players = {0: RandomPlayer(env_id, seed), 1: RandomPlayer(env_id, seed + 1000)}
    return asyncio.run(
        play_game(
            spec,
            players,
            None,
            lora_paths={0: None, 1: None},
            policy_versions={0: -1, 1: -1},
            params=SamplingParams(),
            max_turns=1000,
        )
    )


def test_every_supported_game_is_tested():
    assert sorted(SUPPORTED) == supported_games() == sorted(LEGAL_MOVES)


@pytest.mark.parametrize("env_id", sorted(SUPPORTED.values()) + VARIANTS)
def test_random_plays_only_legal_moves_to_the_end(env_id):
    """The env's own rules judge each move: not one invalid move in 10 games (error allowance 0, so an
    invalid move would end the game at once)."""
    make_or_skip(env_id)
    for seed in range(10):
        result = random_vs_random(env_id, seed)
        assert not result.info.failed, result.info.error
        assert not any(result.info.invalid_move.values()), (seed, result.info.reason)
        assert result.info.num_turns >= 2
        for traj in result.trajectories:
            for step in traj.steps:
                assert step.completion_ids == [] and step.logprobs == [] and step.prompt_ids == []
                assert step.step_info["finish_reason"] == "scripted"


def test_first_moves_are_uniform_over_the_legal_ones():
    """9000 first moves on an empty TicTacToe board: each of the 9 cells ~1000 times (chi-square with 8
    degrees of freedom under 26.1, its 0.1% critical value); Kuhn Poker's 2 opening actions likewise."""
    env = textarena.make("TicTacToe-v0-train")
    env.reset(num_players=2, seed=0)
    _, observation = env.get_observation()
    player = RandomPlayer("TicTacToe-v0-train", seed=123)
    counts = Counter(player.move(env, observation) for _ in range(9000))
    assert sorted(counts) == [f"[{i}]" for i in range(9)]
    chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert chi2 < 26.12, counts

    env = textarena.make("KuhnPoker-v0-train")
    env.reset(num_players=2, seed=0)
    _, observation = env.get_observation()
    player = RandomPlayer("KuhnPoker-v0-train", seed=7)
    counts = Counter(player.move(env, observation) for _ in range(2000))
    assert sorted(counts) == ["[bet]", "[check]"]
    assert (counts["[bet]"] - 1000) ** 2 / 500 < 10.83  # chi-square, 1 degree of freedom, 0.1%


def test_same_seed_same_moves_other_seed_other_moves():
    def actions(seed):
        result = random_vs_random("KuhnPoker-v0-long-train", seed)
        return [(s.pid, s.action) for t in result.trajectories for s in t.steps]

    assert actions(5) == actions(5)
    assert actions(5) != actions(6)


def test_unsupported_game_is_refused_with_one_line_naming_it():
    with pytest.raises(ConfigError) as err:
        check_random_supported(["TicTacToe-v0-train", "Battleship-v0-train"])
    message = str(err.value)
    assert "Battleship-v0-train" in message and "\n" not in message
    assert all(game in message for game in supported_games())
    with pytest.raises(ConfigError, match="Battleship-v0"):
        RandomPlayer("Battleship-v0", seed=0)


def test_a_run_with_random_on_an_unsupported_game_fails_before_anything_starts(tmp_path):
    from unstable_core.runtime.run import Run

    cfg = RunConfig(
        train_envs=["Battleship-v0-train"],
        sampler="fixed",
        fixed_opponents=["random"],
        runs_dir=str(tmp_path),
        run_name="r",
    )
    with pytest.raises(ConfigError, match="Battleship-v0-train"):
        Run.open(cfg)
    cfg = RunConfig(eval_envs=["Battleship-v0-train:2:random"], runs_dir=str(tmp_path), run_name="r")
    with pytest.raises(ConfigError, match="Battleship-v0-train"):
        Run.open(cfg)
    assert not (tmp_path / "r").exists()
    run = Run.open(
        RunConfig(eval_envs=["TicTacToe-v0-train:2:random"], runs_dir=str(tmp_path), run_name="ok")
    )
    assert "random" in run.plan.fixed_opponents and "random" not in run.plan.engines


def test_full_game_against_the_tiny_model_through_the_real_backend(tiny_model):
    """The tiny model (real transformers backend) at seat 0, random at seat 1: the model's turns carry
    tokens and log-probs, random's none, and only the model's seat collects data."""
    from unstable_core.inference.hf.backend import TransformersBackend

    backend = TransformersBackend(tiny_model, device="cpu")
    env_id = "TicTacToe-v0-train"
    spec = GameSpec(
        0, env_id, 11, [PlayerSpec(0, "ckpt-0", collect_data=True), PlayerSpec(1, "random")], eval=True
    )
    result = asyncio.run(
        play_game(
            spec,
            {0: backend.generate, 1: RandomPlayer(env_id, seed=3)},
            {0: backend.tokenizer, 1: None},
            lora_paths={0: None, 1: None},
            policy_versions={0: 0, 1: -1},
            params=SamplingParams(temperature=1.0, max_tokens=8),
            error_allowance=None,  # the env's own: the random-weight model gets a retry
        )
    )
    assert not result.info.failed, result.info.error
    assert sorted(result.info.final_rewards) == [0, 1]
    model, rand = sorted(result.trajectories, key=lambda t: t.pid)
    assert model.collect_data and not rand.collect_data
    assert model.steps and all(
        s.completion_ids and len(s.logprobs) == len(s.completion_ids) for s in model.steps
    )
    assert all(not s.completion_ids and s.action.startswith("[") for s in rand.steps)
    assert [t.pid for t in result.training_trajectories] == [0]
