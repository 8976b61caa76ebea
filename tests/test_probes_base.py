"""What every probe works with: a position's answers and their spellings (a scripted player's move is
matched against them), `NAME[:ENV]` parsed once, and a probe resolved and checked once when planned."""

import pytest

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.probes import Probe, player_policy, position_after
from unstable_core.probes.catalogue import AskedProbe, plan_probes

ANSWERS = {"[check]": ("[check]", "[Check]"), "[bet]": ("[bet]", "[raise]")}


class Says:
    """A scripted player that always writes `move`."""

    def __init__(self, move):
        self.said = move

    def __call__(self, env_id, seed):
        return self

    def move(self, env, observation):
        return self.said


def test_a_scripted_move_is_matched_against_the_spellings():
    position = position_after("opening", "KuhnPoker-v0-train", ANSWERS)
    assert position.move_of(" [CHECK] ") == "[check]" and position.move_of("[raise]") == "[bet]"
    assert player_policy(Says("[raise]"))([position]) == [{"[check]": 0.0, "[bet]": 1.0}]
    with pytest.raises(UnstableError, match=r"played '\[fold\]', which spells none of the answers there"):
        player_policy(Says("[fold]"))([position])


def test_position_after_plays_the_moves_of_a_real_env():
    position = position_after("x", "TicTacToe-v0-train", {"[4]": ("[4]",)}, moves=["[0]", "[8]"], seed=2)
    board = [cell for row in position.env.state.game_state["board"] for cell in row]
    assert board[0] and board[8] and position.pid == position.env.state.current_player_id
    with pytest.raises(UnstableError, match="ended at"):
        position_after("y", "TicTacToe-v0-train", {}, moves=["[0]", "[3]", "[1]", "[4]", "[2]", "[5]"])


def test_name_and_env_are_parsed_once_and_each_probe_planned_once():
    assert AskedProbe.parse("tictactoe-tactics:TicTacToe-v0") == AskedProbe(
        "tictactoe-tactics", "TicTacToe-v0"
    )
    assert str(AskedProbe.parse("tictactoe-tactics")) == "tictactoe-tactics"
    for bad in ("", ":TicTacToe-v0", "tictactoe-tactics:"):
        with pytest.raises(ConfigError, match="is no probe: give NAME or NAME:ENV"):
            AskedProbe.parse(bad)
    planned = plan_probes(
        ["tictactoe-tactics", "tictactoe-tactics:TicTacToe-v0-train", AskedProbe("tictactoe-tactics")]
    )
    assert [p.to_dict() for p in planned] == [{"probe": "tictactoe-tactics", "env_id": "TicTacToe-v0-train"}]
    assert isinstance(planned[0].probe, Probe) and str(planned[0]) == "tictactoe-tactics (TicTacToe-v0-train)"
    on_envs = plan_probes(["tictactoe-tactics"], ["KuhnPoker-v0-train", "TicTacToe-v0", "TicTacToe-v0-train"])
    assert [p.env_id for p in on_envs] == ["TicTacToe-v0", "TicTacToe-v0-train"]  # the envs it covers
    with pytest.raises(ConfigError, match=r"^--eval-probe nope: unknown probe 'nope'"):
        plan_probes(["nope"], option="--eval-probe")
