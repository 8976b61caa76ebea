"""The TicTacToe tactics probe: its committed positions regenerated from real games, the scripted
players' and the uniform player's known scores, positions as real envs, the tiny model end to end."""

import pytest

from unstable_core.eval.probes import run_probe
from unstable_core.games.players.catalogue import load_player_factory
from unstable_core.probes import measure, player_policy, uniform_policy
from unstable_core.probes.tictactoe_tactics import NAME, generate_positions, load_positions, replay

ENV = "TicTacToe-v0-train"


def test_the_committed_positions_are_regenerated_from_real_games():
    assert generate_positions() == load_positions()
    positions = load_positions()
    assert [p["kind"] for p in positions] == ["win"] * 32 + ["block"] * 32
    assert len({(p["seed"], p["kind"]) for p in positions}) == 64  # one of each kind per game at most


def test_scripted_players_and_the_uniform_player_score_what_they_should():
    for name in ("optimal", "heuristic"):
        figures = measure(NAME, player_policy(load_player_factory(name)), ENV).figures
        assert figures["win_mass"].value == figures["block_mass"].value == 1.0
        assert figures["illegal_mass"].value == 0.0
    result = measure(NAME, uniform_policy, ENV)
    for kind in ("win", "block"):
        figure, reference = result.figures[f"{kind}_mass"], result.references[f"{kind}_mass"]
        assert figure.value == pytest.approx(reference["uniform"]) and figure.low < figure.value < figure.high
        assert 0.1 < reference["uniform"] < 0.4 and reference["optimal"] == 1.0
    wrong = measure(NAME, lambda ps: [{m: 0.0 for m in p.answers} for p in ps], ENV)
    assert wrong.figures["illegal_mass"].value == 1.0 and wrong.figures["win_mass"].value == 0.0


def test_positions_are_real_envs_at_the_recorded_moves():
    for record in load_positions()[::9]:
        position = replay(ENV, record)
        assert position.observation.count("placed their symbol") == len(record["moves"])
        assert position.pid == len(record["moves"]) % 2
        assert set(record["right"]) <= {int(m.strip("[]")) for m in position.answers}


def test_the_tiny_model_end_to_end(tiny_model):
    result = run_probe(NAME, tiny_model)
    assert result.env_id == ENV and set(result.figures) == {"win_mass", "block_mass", "illegal_mass"}
    for figure in result.figures.values():
        assert 0.0 <= figure.low <= figure.value <= figure.high <= 1.0
    for p in result.positions:
        assert 0.0 <= p["right_mass"] <= p["legal_mass"] <= 1.0 + 1e-9
