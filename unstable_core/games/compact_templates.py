"""Compact prompts for two games: the state a move depends on, and nothing else.

TextArena's observations repeat every rule on every turn (TicTacToe's prompt is about 235 tokens, Kuhn
Poker's about 260 under `move`), and the words that decide the move, a card or three cells, are a few
tokens among them. A compact prompt is a fifth as long: the learner, this CPU's bound, updates several
times faster, and what the policy must condition on is most of what it reads. Each template reads the
observation TextArena gives (the `-train` wrappers' text), keeps the chat template of the tokenizer
around a short user message, and opens the answer with `[` as `move` does (ended at `]`).

TicTacToe has three: its rows as TextArena prints them (`tictactoe-compact`), its eight lines
(`tictactoe-lines`), where the cells that make three in a line stand side by side, and the same lines from
the mover's side (`tictactoe-mine`: the mover's marks always X).

A template made for one game refuses another game's observation with one line naming it.
"""

from __future__ import annotations

import re
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.games.players.tictactoe import LINES, other
from unstable_core.games.templates import MOVE_END, MOVE_PREFIX

KUHN_RULES = (
    "Kuhn Poker. Cards J < Q < K. Each player antes 1 chip. A bet or a call adds 1 chip to the pot; "
    "a fold loses the pot; else the higher card wins it."
)
TICTACTOE_RULES = "Tic Tac Toe. Get three of your marks in a row, column or diagonal."


def _chat(content: str, tokenizer: Any) -> str:
    """The tokenizer's chat template around one short user message (a short system message in place of a
    default one), the answer opened with `[`; for an API seat, the messages as they are (as `move`)."""
    from unstable_core.inference.chat_prompt import chat_messages

    messages = [{"role": "system", "content": "You play games."}, {"role": "user", "content": content}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return prompt if chat_messages(prompt) is not None else prompt + MOVE_PREFIX


def _moves(observation: str, marker: str, template: str) -> list[str]:
    """The `[...]` moves on the last line that follows `marker`."""
    lines = [line for line in observation.splitlines() if marker in line]
    if not lines:
        raise UnstableError(
            f"template {template}: the observation has no {marker!r} line; it is made for another game"
        )
    return re.findall(r"\[[^\[\]]+\]", lines[-1])


def kuhn_compact(observation: str, tokenizer: Any) -> str:
    """Kuhn Poker: the rules in one line, the round (for a game of several), the card, the moves of this
    round so far, the legal moves."""
    cards = re.findall(r"Your card is: '(\w)'", observation)
    if not cards:
        raise UnstableError(
            "template kuhn-compact: the observation names no card ('Your card is: ...'); it is made for "
            "KuhnPoker envs"
        )
    this_round = observation[observation.rfind("### Starting round") :]
    rounds = re.findall(r"### Starting round (\d+) out of (\d+)", observation)
    me = re.search(r"You are Player (\d)", observation)
    moves = [
        ("you" if me and pid == me.group(1) else "opponent") + f" {move}"
        for pid, move in re.findall(r"Player (\d), submitted move: '\[(\w+)\]'", this_round)
    ]
    chips = re.findall(r"Current scores: Player 0: '(-?\d+)'; Player 1: '(-?\d+)'", observation)
    lines = [KUHN_RULES]
    if rounds and rounds[-1][1] != "1":
        lines.append(f"Round {rounds[-1][0]} of {rounds[-1][1]}.")
        if chips and me:
            mine, theirs = (
                (chips[-1][0], chips[-1][1]) if me.group(1) == "0" else (chips[-1][1], chips[-1][0])
            )
            lines.append(f"Chips: you {mine}, opponent {theirs}.")
    lines.append(f"Your card: {cards[-1]}")
    lines.append("So far: " + (", ".join(moves) if moves else "nothing"))
    lines.append("Your moves: " + " ".join(_moves(observation, "Your available actions are", "kuhn-compact")))
    return _chat("\n".join(lines), tokenizer)


def _tictactoe(observation: str, template: str) -> tuple[str, list[str], list[str]]:
    """(the mover's mark, the board's three rows as TextArena prints them, the legal moves)."""
    mark = re.search(r"you will be '(\w)'", observation)
    board = observation[observation.rfind("Current Board:") :].splitlines()[1:]
    rows = [line.strip() for line in board if "|" in line]
    if mark is None or len(rows) != 3:
        raise UnstableError(
            f"template {template}: the observation has no TicTacToe board and mark; it is made for "
            "TicTacToe envs"
        )
    return mark.group(1), rows, _moves(observation, "Available Moves:", template)


def tictactoe_compact(observation: str, tokenizer: Any) -> str:
    """TicTacToe: the rule in one line, the mover's mark, the board (empty cells by number), the legal moves."""
    mark, rows, moves = _tictactoe(observation, "tictactoe-compact")
    lines = [TICTACTOE_RULES, f"You are {mark}.", *rows, "Your moves: " + " ".join(moves)]
    return _chat("\n".join(lines), tokenizer)


def _lines_prompt(cells: list[str], who: str, moves: list[str], tokenizer: Any) -> str:
    """The eight lines of the 9 `cells` (row by row), under the rule and `who` the mover is."""
    lines = [" ".join(cells[i] for i in line) for line in LINES]
    text = [TICTACTOE_RULES, who, "Lines:", *lines, "Your moves: " + " ".join(moves)]
    return _chat("\n".join(text), tokenizer)


def tictactoe_lines(observation: str, tokenizer: Any) -> str:
    """TicTacToe as its eight lines (three rows, three columns, two diagonals), each cell a mark or its
    number: three in a line is what wins, and a line's two marks and one number read next to each other,
    where on the board they lie a row or two apart. Nothing is computed from it: the cells as they are."""
    mark, rows, moves = _tictactoe(observation, "tictactoe-lines")
    cells = [cell.strip() for row in rows for cell in row.split("|")]
    return _lines_prompt(cells, f"You are {mark}.", moves, tokenizer)


def tictactoe_mine(observation: str, tokenizer: Any) -> str:
    """TicTacToe's eight lines from the mover's side (the canonical board of game-playing RL): the mover's
    marks always X, the opponent's O, whichever the env gave it; a line with two X and a number reads the
    same for either seat. Nothing is computed from the board: its marks relabelled."""
    mark, rows, moves = _tictactoe(observation, "tictactoe-mine")
    mine = {mark: "X", other(mark): "O"}
    cells = [mine.get(cell.strip(), cell.strip()) for row in rows for cell in row.split("|")]
    return _lines_prompt(cells, "Your marks are X, the opponent's O.", moves, tokenizer)


for _template in (kuhn_compact, tictactoe_compact, tictactoe_lines, tictactoe_mine):
    _template.answer_prefix = MOVE_PREFIX  # type: ignore[attr-defined]
    _template.answer_stop = MOVE_END  # type: ignore[attr-defined]
