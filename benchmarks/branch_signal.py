"""Does branching's signal single out TicTacToe's tactics? Read a run's games and, at each branched learner
state with an immediate win (or, lacking one, a needed block), compare the right cell's value with the other
legal cells', and the cell played with a uniform legal pick. A row per tactic and opponent.

    python3 benchmarks/branch_signal.py --run runs/<name>     # a run trained with branch_samples > 0

If the right cell is worth more than the others but is played no more often than a uniform pick, the
signal is there and the policy does not follow it (a learning problem, not a valuation one).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from unstable_core.games.players.tictactoe import MARKS, Board, winning_cells
from unstable_core.report.stats import Rate

ROW = re.compile(r"^\s*(\S) \| (\S) \| (\S)\s*$", re.M)  # "O | 1 | X": a digit is an empty cell


def board_from_prompt(prompt: str) -> Board:
    """The last board drawn in the prompt, 9 cells row by row ("" empty, "O" or "X")."""
    rows = ROW.findall(prompt)[-3:]
    if len(rows) != 3:
        raise ValueError(f"no TicTacToe board in the prompt's end: {prompt[-200:]!r}")
    return tuple("" if cell.isdigit() else cell for row in rows for cell in row)


def tactic_of(step: dict[str, Any]) -> tuple[str, set[int]] | None:
    """("win", its cells) or ("block", the cells that stop the opponent's win), else None."""
    board, mark = board_from_prompt(step["obs"]), MARKS[step["pid"]]
    wins = set(winning_cells(board, mark))
    if wins:
        return "win", wins
    blocks = set(winning_cells(board, MARKS[1 - step["pid"]]))
    return ("block", blocks) if blocks else None


def tally(games: list[dict[str, Any]]) -> dict[tuple[str, str], Counter]:
    """Per (tactic, opponent): states, right cell at the value's max, alone there, the summed value gap
    (right cell minus the others' mean), right cell played, and a uniform pick's summed chance."""
    rows: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for game in games:
        scripted = [m for m in game["info"]["models"].values() if not m.startswith("ckpt-")]
        opponent = scripted[0] if scripted else "self"
        for trajectory in game["trajectories"]:
            for step in trajectory["steps"]:
                legal = step.get("step_info", {}).get("legal") or {}
                found = tactic_of(step) if legal.get("values") else None
                if found is None:
                    continue
                kind, right = found
                cells = [int(move.strip("[]")) for move in legal["moves"]]
                values = dict(zip(cells, legal["values"], strict=True))
                best, mine = max(values.values()), max(values[c] for c in right)
                others = [v for c, v in values.items() if c not in right]
                row = rows[(kind, opponent)]
                row["n"] += 1
                row["at_max"] += mine == best
                row["alone"] += mine == best and all(v < best for v in others)
                row["gap"] += mine - (sum(others) / len(others) if others else 0.0)
                row["played"] += legal["played"] >= 0 and cells[legal["played"]] in right
                row["uniform"] += len(right) / len(cells)
    return rows


def main(argv: list[str] | None = None) -> dict[tuple[str, str], Counter]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=Path, required=True, help="a run directory (its games/games.jsonl)")
    args = parser.parse_args(argv)
    path = args.run / "games" / "games.jsonl"
    if not path.is_file():
        sys.exit(f"Error: {path} does not exist: give --run a run directory (runs/<name>)")
    rows = tally([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
    if not rows:
        sys.exit(
            f"Error: no branched state with a win or a block in {path}: was the run made with branch_samples?"
        )
    line = "{:6}  {:10}  {:>6}  {!s:30}  {!s:30}  {:>9}  {}".format
    print(line("tactic", "opponent", "states", "right cell at the max", "alone at the max", "value gap",
               "played (uniform pick)"))  # fmt: skip
    for (kind, opponent), row in sorted(rows.items()):
        n = row["n"]
        at_max, alone, gap = Rate(row["at_max"], n), Rate(row["alone"], n), f"{row['gap'] / n:+.2f}"
        played = f"{Rate(row['played'], n)} ({row['uniform'] / n:.2f})"
        print(line(kind, opponent, n, at_max, alone, gap, played))
    return rows


if __name__ == "__main__":
    main()
