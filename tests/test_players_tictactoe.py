"""Scripted players as opponents: TicTacToe's optimal and heuristic in real games (optimal never loses,
draws itself; a game's seed replays its moves), as a run's fixed or evaluation opponent (checked before
anything starts), and in `unstable eval` through the real runtime."""

import asyncio

import pytest

from unstable_core.games.loop import play_game
from unstable_core.games.players.catalogue import make_player, seat_seed
from unstable_core.games.players.tictactoe import heuristic_cells, optimal_cells, score
from unstable_core.inference.base import SamplingParams
from unstable_core.types import GameSpec, PlayerSpec

ENV = "TicTacToe-v0-train"


def play(names: tuple[str, str], seed: int):
    """A real game between two scripted players (seat 0 first), as the collector seats them."""
    spec = GameSpec(0, ENV, seed, [PlayerSpec(pid, name) for pid, name in enumerate(names)])
    players = {pid: make_player(name, ENV, seed, pid) for pid, name in enumerate(names)}
    result = asyncio.run(
        play_game(spec, players, {0: None, 1: None}, lora_paths={0: None, 1: None},
                  policy_versions={0: -1, 1: -1}, params=SamplingParams())
    )  # fmt: skip
    assert not result.info.failed, result.info.error
    return result


def test_minimax_values():
    empty = ("",) * 9
    assert score(empty, "O") == 0  # TicTacToe is a draw
    board = ("X", "X", "", "O", "O", "", "", "", "")
    assert optimal_cells(board, "O") == [5]  # the win now, not the block
    assert optimal_cells(board, "X") == [2]
    assert heuristic_cells(("X", "X", "", "", "O", "", "", "", ""), "O") == [2]  # no win: the block
    assert sorted(optimal_cells(empty, "O")) == list(range(9))  # every opening draws: ties broken at random


def test_optimal_never_loses_and_draws_itself():
    for seed in range(6):
        for names in (("optimal", "random"), ("random", "optimal"), ("heuristic", "optimal")):
            rewards = play(names, seed).info.final_rewards
            assert rewards[names.index("optimal")] >= 0, (names, seed, rewards)
        assert play(("optimal", "optimal"), seed).info.final_rewards == {0: 0.0, 1: 0.0}


def test_the_same_game_seed_replays_the_moves_and_another_varies_them():
    def moves(seed):
        return [s.action for t in play(("optimal", "heuristic"), seed).trajectories for s in t.steps]

    assert moves(3) == moves(3)
    assert len({tuple(moves(seed)) for seed in range(8)}) > 1
    assert seat_seed("optimal", 3, 0) != seat_seed("optimal", 3, 1) != seat_seed("heuristic", 3, 1)


def test_a_run_checks_its_scripted_opponents_before_anything_starts(tmp_path):
    from unstable_core.config import RunConfig
    from unstable_core.errors import ConfigError
    from unstable_core.runtime.run import Run

    for cfg in (
        RunConfig(train_envs=["KuhnPoker-v0-train"], sampler="fixed", fixed_opponents=["heuristic"]),
        RunConfig(eval_envs=["KuhnPoker-v0-train:2:heuristic"]),
    ):
        cfg.runs_dir, cfg.run_name = str(tmp_path), "r"
        with pytest.raises(ConfigError, match="cannot play KuhnPoker-v0-train: it plays TicTacToe") as err:
            Run.open(cfg)
        assert "\n" not in str(err.value) and "the players are: heuristic (TicTacToe)" in str(err.value)
    assert not (tmp_path / "r").exists()
    cfg = RunConfig(sampler="fixed", fixed_opponents=["heuristic"], eval_envs=[f"{ENV}:2:optimal"],
                    runs_dir=str(tmp_path), run_name="ok")  # fmt: skip
    plan = Run.open(cfg).plan
    assert {"heuristic", "optimal"} <= set(plan.fixed_opponents) and set(plan.engines) == {"main"}
    assert plan.player_envs() == [("heuristic", ENV), ("optimal", ENV)]


def test_scripted_players_meet_in_unstable_eval_through_the_runtime(tmp_path):
    """`unstable eval heuristic --opponent optimal`: the collector seats both as code (no model loaded);
    heuristic never beats optimal."""
    import json
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "unstable_core", "eval", "heuristic", "--opponent", "optimal", "--games", "6",
           "--json", "--out", str(tmp_path / "e")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=dict(os.environ))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (row,) = json.loads(proc.stdout)["results"]
    assert (row["model"], row["opponent"], row["env"], row["games"]) == ("heuristic", "optimal", ENV, 6)
    assert row["wins"] == 0 and row["draws"] + row["losses"] == 6
