"""A run directory keeps its league in `league.json`. One written before that name, with its league in
`registry.json` only, still resumes into that file, and its leaderboard, export and pictures still read it:
`league_path` is the one place that knows the old name."""

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from unstable_core.cli.main import cli
from unstable_core.league.league import League, league_path
from unstable_core.report.plots import plot_run
from unstable_core.runtime.actors.league import LeagueActor
from unstable_core.runtime.actors.recorder import Recorder
from unstable_core.types import GameInformation, GameResult, Step, Trajectory

TTT = "TicTacToe-v0-train"
OLD_RUN = Path(__file__).parent / "fixtures" / "run-7a23685"  # written by unstable at 7a23685
PROMPT = "<|im_start|>user\nYou are X. Your move?<|im_end|>\n<|im_start|>assistant\n"


def test_a_new_run_keeps_its_league_in_league_json(tmp_path):
    assert league_path(tmp_path) == tmp_path / "league.json"
    (tmp_path / "registry.json").write_text("{}")
    assert league_path(tmp_path) == tmp_path / "registry.json"
    (tmp_path / "league.json").write_text("{}")
    assert league_path(tmp_path) == tmp_path / "league.json"  # beside an old file, the new name wins


def old_run(run_dir):
    """A run directory as written before the rename: ckpt-0, base and ckpt-1, whose one game (a win
    against base, a ChatML prompt) is rated; the league in registry.json. Returns the league."""
    league = League()
    league.add_checkpoint("ckpt-0", None, 0, inherit=False)
    league.add_fixed("base")
    league.add_checkpoint("ckpt-1", str(run_dir / "checkpoints" / "step-1"), 1)
    step = Step(pid=0, env_id=TTT, obs=PROMPT, act="[4]", action="[4]", model_uid="ckpt-1", policy_version=1)
    info = GameInformation(
        game_idx=0,
        env_id=TTT,
        models={0: "ckpt-1", 1: "base"},
        learner_pids=[0],
        final_rewards={0: 1.0, 1: -1.0},
    )
    recorder = Recorder(run_dir)
    recorder.add_game(
        GameResult(info=info, trajectories=[Trajectory(0, TTT, "ckpt-1", [step], collect_data=True)])
    )
    recorder.close()
    league.update_ratings(["ckpt-1", "base"], [1.0, -1.0], TTT)
    league.save(run_dir / "registry.json")
    return league


def test_a_run_dir_with_only_registry_json_resumes_into_it(tmp_path):
    saved = old_run(tmp_path)
    assert League.load(league_path(tmp_path)) == saved
    # as a resumed run starts its league: the state saved with the checkpoint, written to the run's file
    actor = LeagueActor(league_path(tmp_path), state=saved.to_dict())
    actor.add_checkpoint("ckpt-2", str(tmp_path / "checkpoints" / "step-2"), 2)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["registry.json"]  # never two leagues
    assert League.load(tmp_path / "registry.json").get_current_ckpt() == "ckpt-2"


def test_a_run_dir_with_only_registry_json_has_its_leaderboard_export_and_pictures(tmp_path):
    old_run(tmp_path)
    board = CliRunner().invoke(cli, ["leaderboard", str(tmp_path), "--json"])
    assert board.exit_code == 0, board.output
    models = {m["uid"]: m for m in json.loads(board.output)["models"]}
    assert set(models) == {"ckpt-0", "base", "ckpt-1"}
    assert (models["ckpt-1"]["wins"], models["base"]["losses"]) == (1, 1)
    assert models["ckpt-1"]["win_rate_vs"]["base"]["n"] == 1

    export = CliRunner().invoke(cli, ["export", str(tmp_path)])
    assert export.exit_code == 0, export.output
    (record,) = [json.loads(line) for line in export.stdout.splitlines() if line.strip()]
    assert record["messages"][-1] == {"role": "assistant", "content": "[4]"}

    assert "ratings.png" in [p.name for p in plot_run(tmp_path)]
    assert not (tmp_path / "league.json").exists()


def test_the_run_directory_written_at_7a23685_has_its_leaderboard_export_and_pictures(tmp_path):
    run_dir = shutil.copytree(OLD_RUN, tmp_path / "old")
    assert league_path(run_dir) == run_dir / "registry.json"
    saved = json.loads((run_dir / "registry.json").read_text())
    board = CliRunner().invoke(cli, ["leaderboard", str(run_dir), "--json"])
    assert board.exit_code == 0, board.output
    models = {m["uid"]: m for m in json.loads(board.output)["models"]}
    assert set(models) == {m["uid"] for m in saved["models"] if m.get("active", True)}
    assert all(models[m["uid"]]["mu"] == m["mu"] for m in saved["models"] if m["uid"] in models)
    export = CliRunner().invoke(cli, ["export", str(run_dir)])
    assert export.exit_code == 0, export.output
    records = [json.loads(line) for line in export.stdout.splitlines()]
    assert records and all(r["messages"][-1]["role"] == "assistant" for r in records)
    assert "ratings.png" in [p.name for p in plot_run(run_dir)]
