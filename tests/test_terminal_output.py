"""What a person reads on the terminal, from snapshots built by hand: short labels in the progress line and
the tables (`train invalid 0.62`, not `train/TicTacToe-v0-train/invalid_move_rate`), no label cut off with
an ellipsis at 80 or 120 columns, and a summary that opens with what was learned and never prints NaN."""

import json
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from unstable_core.cli.progress import _progress_table, execute, progress_line, rates_table, ratings_table
from unstable_core.report.checkpoint_rates import VersionRates
from unstable_core.report.scheduled_eval import evals_table

TTT, NIM = "TicTacToe-v0-train", "Nim-v0-train"
LONG_OPPONENT = "openai:meta-llama/Llama-3.1-70B-Instruct"


def evals(env_opponents, version=4):
    """A scheduled evaluation of ckpt-`version`: 3 wins, 1 loss per (env, opponent)."""
    m = {}
    for env, opp in env_opponents:
        key = f"eval/{env}/vs_{opp}"
        m.update(
            {f"{key}/{k}": v for k, v in (("games", 4.0), ("failed", 0.0), ("wins", 3.0), ("draws", 0.0))}
        )
        m.update({f"{key}/losses": 1.0, f"{key}/steps": 9.0, f"{key}/mean_reward": 0.5})
        for name in ("win_rate", "score", "invalid_move_rate", "format_rate"):
            m.update({f"{key}/{name}": 0.75, f"{key}/{name}_lo": 0.301, f"{key}/{name}_hi": 0.954})
    return {version: m}


def snapshot(envs=(TTT,), opponents=("base",)):
    means = {}
    for env in envs:
        means.update(
            {
                f"train/{env}/invalid_move_rate": 0.62,
                f"train/{env}/format_rate": 0.1,
                f"train/{env}/game_length": 5.5,
                f"eval/{env}/invalid_move_rate": 0.5,
                f"eval/{env}/win_rate": 0.55,
                f"eval/{env}/score": 0.6,
            }
        )
    return {
        "elapsed_s": 36,
        "learner_step": 4,
        "counts": {
            "train_games": 30,
            "train_failed": 2,
            "eval_games": 12,
            "train_seat0_win": 20,
            "eval_draw": 3,
        },
        "means": means,
        "learner": {"loss": 0.01226, "grad_norm": 0.12, "update_s": 1.1},
        "inference": {"tokens_per_s": 29.3},
        "evals": evals([(env, opp) for env in envs for opp in opponents]),
        "failures": {"errors": [{"count": 2, "error": "game did not finish within max_turns=30 " * 4}]},
    }


def render(renderable, width: int) -> str:
    console = Console(width=width, record=True)
    console.print(renderable)
    return console.export_text()


def test_env_ids_shorten_to_their_game_unless_two_would_read_alike():
    from unstable_core.report.labels import short_env, short_env_names

    assert short_env(TTT) == "TicTacToe" and short_env("2048-v0-easy-train") == "2048-easy"
    assert short_env_names([TTT, NIM]) == {TTT: "TicTacToe", NIM: "Nim"}
    assert short_env_names(["TicTacToe-v0", TTT]) == {"TicTacToe-v0": "TicTacToe-v0", TTT: TTT}


def test_the_progress_line_uses_short_labels():
    """Before: `games train 30 (failed 2) eval 12 (failed 0) | eval/TicTacToe-v0-train/invalid_move_rate 0.500 |
    ...`, the evaluation keys sorted before the training ones."""
    assert progress_line(snapshot(), 6) == (
        "[    36 s] | step 4/6 | games train 30 (2 failed) eval 12 | train invalid 0.62 | train format 0.10 | "
        "eval invalid 0.50 | eval win 0.55 | loss 0.01226 | tokens/s 29.3 | "
        "eval ckpt-4 vs base win 0.75 [0.30, 0.95] W/D/L 3/0/1"
    )


def test_with_several_envs_each_label_names_its_env():
    line = progress_line(snapshot(envs=(TTT, NIM)), 6)
    assert "| train Nim invalid 0.62 | train Nim format 0.10 | train TicTacToe invalid 0.62 |" in line
    assert "| eval ckpt-4 Nim vs base win 0.75" in line and "| eval ckpt-4 TicTacToe vs base win 0.75" in line
    assert "-v0" not in line and "_rate" not in line


@pytest.mark.parametrize("width", [80, 120])
def test_no_table_cuts_a_label_off(width):
    """Before, at 80 columns: `eval/TicTacToe-v0-train/invalid_mov…` in the summary, `checkpo…` and
    `TicTacT…` in the evaluation table."""
    snap = snapshot(envs=(TTT, NIM), opponents=("base", LONG_OPPONENT))
    progress = render(_progress_table(snap, 6, "unstable run (reinforce, mirror): summary"), width)
    for label in ("train TicTacToe invalid", "eval Nim score", "train Nim turns", "learner grad_norm"):
        assert re.search(rf"│ {label} +│", progress), (label, progress)
    assert "eval ckpt-4 TicTacToe vs base" in progress
    league = {
        "models": [
            {
                "uid": uid,
                "kind": kind,
                "mu": 25.0,
                "sigma": 8.3,
                "games": 4,
                "wins": 1,
                "draws": 2,
                "losses": 1,
            }
            for uid, kind in (("ckpt-12", "checkpoint"), ("base", "fixed"), (LONG_OPPONENT, "fixed"))
        ]
    }
    opponents = ("base", "random", LONG_OPPONENT)
    rates = {
        v: VersionRates(
            versions=[v],
            wins=dict.fromkeys(opponents, 3),
            games=dict.fromkeys(opponents, 40),
            draws=dict.fromkeys(opponents, 1),
            seats=[(5, 2, 1)] * 30,
        )
        for v in range(3)
    }
    tables = [
        render(evals_table(snap["evals"]), width),
        render(ratings_table(league), width),
        render(rates_table(rates), width),
    ]
    for text in [progress, *tables]:
        assert "…" not in text and "nan" not in text, text
    for table, words in zip(
        tables,
        [("ckpt-4", "TicTacToe", "Nim", "opponent", "invalid", "format", "[0.301,", "3/0/1"),
         ("ckpt-12", "checkpoint", "sigma", "W/D/L"),
         ("ckpt", "invalid", "formatted", "random,", "(n=150)", "3/1/36")],
        strict=True,
    ):  # fmt: skip
        for word in words:  # whole, not folded
            assert re.search(rf"(^|[ │┃]){re.escape(word)}([ │┃]|$)", table, re.MULTILINE), (word, table)


def test_the_ratings_table_shows_the_games_its_w_d_l_leave_out():
    """A default run: ckpt-10 played 15 games, 6 rated (all won) and 9 against itself, which rate nobody;
    the table said `15` and `6/0/0` with nothing to say where the other 9 went."""
    from unstable_core.league.league import League

    league = League()
    league.add_fixed("base")
    league.add_checkpoint("ckpt-10", None, 10, inherit=False)
    for _ in range(6):
        league.update_ratings(["ckpt-10", "base"], [1.0, -1.0], "TicTacToe-v0-train")
    for _ in range(9):
        league.update_ratings(["ckpt-10", "ckpt-10"], [1.0, -1.0], "TicTacToe-v0-train")
    text = render(ratings_table(league.to_dict()), 80)
    assert re.search(r"│ ckpt-10 .*│ 15 +│ 6/0/0 \+ 9 self +│", text), text
    assert re.search(r"│ base .*│ 6 +│ 0/0/6 +│", text), text
    assert "games = W + D + L + self: games against itself" in text


class FakeRun:
    """What `execute` asks of a run: start, wait (one progress snapshot), its folder and config."""

    def __init__(self, run_dir, snap):
        self.run_dir, self.snap, self.cfg = run_dir, snap, SimpleNamespace(progress_every_s=0.0)

    def start(self, **kwargs):
        pass

    def wait(self, on_progress, poll_s, on_event):
        on_progress(self.snap)
        return dict(self.snap)


def test_the_summary_opens_with_what_was_learned_and_never_prints_nan(tmp_path, capsys, monkeypatch):
    """Every move invalid, as with the tiny model. Before: `first vs last quarter, invalid_move_rate:
    versions [0] 1.000 -> versions [3] 1.000 (z = nan, p = 1)`."""
    monkeypatch.setenv("COLUMNS", "80")
    games = []
    for v in range(4):
        step = {"policy_version": v, "invalid_move": True, "format_ok": False}
        info = {"models": {"0": f"ckpt-{v}", "1": f"ckpt-{v}"}, "final_rewards": {"0": -1, "1": 0}}
        games += [{"info": info, "trajectories": [{"collect_data": True, "steps": [step]}]}] * 3
    (tmp_path / "games").mkdir()
    (tmp_path / "games" / "games.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    snap = snapshot()
    del snap["evals"]
    execute(FakeRun(tmp_path, snap), 3, "unstable run (reinforce, mirror)")
    lines = capsys.readouterr().out.splitlines()
    last_progress = max(i for i, line in enumerate(lines) if line.startswith("[    36 s] | step 4/3 | "))
    assert lines[last_progress + 1] == (
        "result: no test: invalid moves per turn: the same outcome (1.00) in all 6 turns; "
        "formatted answers per turn: the same outcome (0.00) in all 6 turns"
    )
    out = "\n".join(lines)
    assert "nan" not in out and "z = " not in out and "…" not in out
    assert "  invalid moves per turn, ckpt 0 vs ckpt 3: 1.000 [0.439, 1.000] (n=3) -> 1.000 [0.439, 1.000] " \
        "(n=3): no test, the same outcome (1.00) in all 6 turns" in lines  # fmt: skip


def test_a_training_run_prints_its_reward_pipeline_at_start_and_in_its_summary(tmp_path, capsys):
    from unstable_core.config import load_config

    run = FakeRun(tmp_path, snapshot())
    run.cfg = load_config(None, {"step_transforms": ["+reward-for-format:reward=0.5"]})
    execute(run, 3, "unstable run (reinforce, mirror)")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("reward pipeline: ")]
    assert (
        lines
        == [
            "reward pipeline: final role-advantage-by-env -> step reward-for-format(reward=1.5, penalty=0.0), "
            "penalty-for-invalid-move(reward=1.0, penalty=-1.0), reward-for-format(reward=0.5) -> sampling "
            "normalize-by-env(z_score=True)"
        ]
        * 2
    )
    execute(run, None, "unstable play (TicTacToe-v0-train)")  # play trains nothing: no pipeline
    assert "reward pipeline" not in capsys.readouterr().out
