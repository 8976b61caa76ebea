"""kuhn-compact and tictactoe-compact: a real env's observation in a few lines, the answer opened with [."""

import pytest

from unstable_core.envs.catalogue import make_env
from unstable_core.errors import UnstableError
from unstable_core.games.templates import answer_prefix, answer_stop, get_template, render_prompt


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def observe(env_id: str, moves: list[str], seed: int = 5) -> str:
    env = make_env(env_id)
    env.reset(num_players=2, seed=seed)
    for move in moves:
        env.step(move)
    return env.get_observation()[1]


def test_kuhn_compact_keeps_the_card_the_rounds_moves_and_the_legal_ones(tokenizer):
    text, ids = render_prompt("kuhn-compact", observe("KuhnPoker-v0-chips", ["[bet]"]), tokenizer)
    assert text.endswith("<|im_start|>assistant\n[")
    assert "Your card: J\nSo far: opponent bet\nYour moves: [fold] [call]" in text
    assert "Round" not in text  # one round: nothing to count
    assert len(ids) < len(render_prompt("move", observe("KuhnPoker-v0-chips", ["[bet]"]), tokenizer)[1]) / 3


def test_kuhn_compact_counts_rounds_and_chips_and_forgets_past_rounds_moves(tokenizer):
    text, _ = render_prompt(
        "kuhn-compact", observe("KuhnPoker-v0-short-chips", ["[check]", "[check]"]), tokenizer
    )
    assert "Round 2 of 5.\nChips: you -1, opponent 1.\n" in text and "So far: nothing" in text


def test_tictactoe_compact_shows_the_board_and_the_mark(tokenizer):
    text, _ = render_prompt("tictactoe-compact", observe("TicTacToe-v0-train", ["[4]", "[0]"]), tokenizer)
    assert "You are O.\nX | 1 | 2\n3 | O | 5\n6 | 7 | 8\nYour moves: [1] [2] [3] [5] [6] [7] [8]" in text


def test_tictactoe_lines_shows_each_line_and_where_two_marks_meet_a_free_cell(tokenizer):
    text, _ = render_prompt(
        "tictactoe-lines", observe("TicTacToe-v0-train", ["[4]", "[0]", "[2]"]), tokenizer
    )
    rows, columns, diagonals = "X 1 O\n3 O 5\n6 7 8", "X 3 6\n1 O 7\nO 5 8", "X O 8\nO O 6"
    assert f"You are X.\nLines:\n{rows}\n{columns}\n{diagonals}\nYour moves: [1] [3] [5] [6] [7] [8]" in text


def test_tictactoe_mine_shows_the_movers_marks_as_x_for_either_seat(tokenizer):
    x_moves, _ = render_prompt(
        "tictactoe-mine", observe("TicTacToe-v0-train", ["[4]", "[0]", "[2]"]), tokenizer
    )
    o_moves, _ = render_prompt("tictactoe-mine", observe("TicTacToe-v0-train", ["[4]", "[0]"]), tokenizer)
    rows, columns, diagonals = "X 1 O\n3 O 5\n6 7 8", "X 3 6\n1 O 7\nO 5 8", "X O 8\nO O 6"
    assert f"Your marks are X, the opponent's O.\nLines:\n{rows}\n{columns}\n{diagonals}\n" in x_moves
    assert "Lines:\nO 1 2\n3 X 5\n" in o_moves  # the env's O at 4 is the mover's: X for it
    assert "You are" not in x_moves + o_moves


@pytest.mark.parametrize("name", ["kuhn-compact", "tictactoe-compact", "tictactoe-lines", "tictactoe-mine"])
def test_a_compact_template_opens_and_closes_the_move_as_move_does(name):
    template = get_template(name)
    assert (answer_prefix(template), answer_stop(template)) == ("[", "]")


def test_a_compact_template_refuses_another_games_observation(tokenizer):
    with pytest.raises(UnstableError, match="kuhn-compact.*KuhnPoker"):
        render_prompt("kuhn-compact", observe("TicTacToe-v0-train", []), tokenizer)
    with pytest.raises(UnstableError, match="tictactoe-compact.*TicTacToe"):
        render_prompt("tictactoe-compact", observe("KuhnPoker-v0-chips", []), tokenizer)
    with pytest.raises(UnstableError, match="tictactoe-lines.*TicTacToe"):
        render_prompt("tictactoe-lines", observe("KuhnPoker-v0-chips", []), tokenizer)
