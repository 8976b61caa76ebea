"""benchmarks/legal_answers.py: the three ways of scoring legal answers agree, and each is timed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


def test_the_two_passes_agree_with_per_state_and_flat_scoring(import_benchmark, capsys):
    bench = import_benchmark("legal_answers")
    found = bench.main(
        ["--states", "4", "--answers", "3", "--frame", "24", "--own-prompt", "6", "--repeats", "1"]
    )
    assert set(found) == {"two passes", "per state", "flat"}
    for row in found.values():
        assert row["seconds"] > 0 and row["max_dy"] < 1e-4 and row["grad_rel"] < 1e-4
    assert "x1.00 of two passes" in capsys.readouterr().out
