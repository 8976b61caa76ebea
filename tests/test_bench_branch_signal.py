"""benchmarks/branch_signal.py: the tactic at a branched state, and its row's figures, on hand-made games."""

from __future__ import annotations

import json

import pytest


def step(board: str, pid: int, moves: list[int], values: list[float], played: int) -> dict:
    rows = [board[i : i + 3] for i in (0, 3, 6)]
    drawn = "\n".join(
        " | ".join(c if c != "." else str(3 * r + i) for i, c in enumerate(row)) for r, row in enumerate(rows)
    )
    legal = {"moves": [f"[{m}]" for m in moves], "played": played, "values": values}
    return {"pid": pid, "obs": f"You are O.\n{drawn}\nYour moves: ...", "step_info": {"legal": legal}}


def game(opponent: str, *steps: dict) -> dict:
    return {"info": {"models": {"0": "ckpt-3", "1": opponent}}, "trajectories": [{"steps": list(steps)}]}


def test_rows_count_the_right_cells_value_and_play(import_benchmark, tmp_path, capsys):
    bench = import_benchmark("branch_signal")
    # O (seat 0) wins at 1; its other cells: 3 also worth 1, 5 worth -1; it played 3
    win = step("O.O.X.X..", 0, [1, 3, 5, 7, 8], [1.0, 1.0, -1.0, 0.0, 0.0], played=1)
    # no O win; X threatens 2-4-6 at 2: the block, alone at the max, played
    block = step("O..OX.X..", 0, [1, 2, 5, 7, 8], [-1.0, 0.5, -1.0, -1.0, -1.0], played=1)
    quiet = step("O...X....", 0, [1, 2, 3], [0.0, 0.0, 0.0], played=0)  # no tactic: not counted
    unbranched = step("O.O.X.X..", 0, [1, 3], None, played=0)
    (tmp_path / "games").mkdir()
    lines = [game("random", win, quiet, unbranched), game("heuristic", block)]
    (tmp_path / "games" / "games.jsonl").write_text("\n".join(json.dumps(g) for g in lines) + "\n")

    rows = bench.main(["--run", str(tmp_path)])
    win_row, block_row = rows[("win", "random")], rows[("block", "heuristic")]
    assert (win_row["n"], win_row["at_max"], win_row["alone"], win_row["played"]) == (1, 1, 0, 0)
    assert win_row["gap"] == pytest.approx(1.0 - 0.0)  # 1 against the mean of 1, -1, 0, 0
    assert win_row["uniform"] == pytest.approx(0.2)
    assert (block_row["n"], block_row["alone"], block_row["played"]) == (1, 1, 1)
    assert set(rows) == {("win", "random"), ("block", "heuristic")}
    assert "win     random" in capsys.readouterr().out


def test_a_missing_run_is_one_line(import_benchmark, tmp_path):
    bench = import_benchmark("branch_signal")
    with pytest.raises(SystemExit, match="does not exist"):
        bench.main(["--run", str(tmp_path / "none")])
