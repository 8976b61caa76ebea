"""`unstable leaderboard` on a run directory written here by the real league and recorder code: values
against counts and Wilson intervals worked out by hand."""

import json

from click.testing import CliRunner

from unstable_core.cli.main import cli
from unstable_core.league.league import League
from unstable_core.runtime.actors.recorder import Recorder
from unstable_core.types import GameInformation, GameResult

TTT = "TicTacToe-v0-train"


def play(idx: int, models: dict[int, str], rewards: dict[int, float], eval_: bool = True) -> GameResult:
    learners = [p for p, m in models.items() if m.startswith("ckpt-")]
    info = GameInformation(
        game_idx=idx, env_id=TTT, eval=eval_, models=models, learner_pids=learners, final_rewards=rewards
    )
    return GameResult(info=info)


def make_run(tmp_path):
    """ckpt-1 against base: win, win, draw, loss (seats alternated); ckpt-0 loses to base once; a mirror
    game of ckpt-1; a failed game (left out). Rated as the collector rates them."""
    league = League()
    league.add_checkpoint("ckpt-0", None, 0, inherit=False)
    league.add_fixed("base")
    league.add_checkpoint("ckpt-1", str(tmp_path / "checkpoints" / "step-1"), 1)
    games = [
        play(0, {0: "ckpt-1", 1: "base"}, {0: 1.0, 1: -1.0}),
        play(1, {0: "base", 1: "ckpt-1"}, {0: -1.0, 1: 1.0}),
        play(2, {0: "ckpt-1", 1: "base"}, {0: 0.0, 1: 0.0}),
        play(3, {0: "base", 1: "ckpt-1"}, {0: 1.0, 1: -1.0}),
        play(4, {0: "ckpt-0", 1: "base"}, {0: -1.0, 1: 1.0}),
        play(5, {0: "ckpt-1", 1: "ckpt-1"}, {0: 1.0, 1: -1.0}, eval_=False),
    ]
    failed = play(6, {0: "ckpt-1", 1: "base"}, {})
    failed.info.failed = True
    tracker = Recorder(tmp_path)
    for g in [*games, failed]:
        tracker.add_game(g)
        if not g.info.failed:
            pids = sorted(g.info.final_rewards)
            league.update_ratings(
                [g.info.models[p] for p in pids], [g.info.final_rewards[p] for p in pids], TTT
            )
    tracker.close()
    league.save(tmp_path / "league.json")
    return league


def test_leaderboard_json_matches_hand_computed_counts_and_intervals(tmp_path):
    league = make_run(tmp_path)
    out = tmp_path / "pictures"
    result = CliRunner().invoke(cli, ["leaderboard", str(tmp_path), "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    models = {m["uid"]: m for m in data["models"]}
    assert sorted(models) == ["base", "ckpt-0", "ckpt-1"]  # the inactive dummy is never listed
    for uid, m in models.items():
        meta = league.get_model(uid)
        assert (m["mu"], m["sigma"]) == (meta.mu, meta.sigma)
        assert abs(m["mu_minus_3sigma"] - (meta.mu - 3 * meta.sigma)) < 1e-12
    conservative = [m["mu_minus_3sigma"] for m in data["models"]]
    assert conservative == sorted(conservative, reverse=True)
    # league counts: ckpt-1 played 5 (one mirror game, not rated): 2 wins, 1 draw, 1 loss
    c1 = models["ckpt-1"]
    assert (c1["games"], c1["wins"], c1["draws"], c1["losses"]) == (5, 2, 1, 1)
    base = models["base"]
    assert (base["games"], base["wins"], base["draws"], base["losses"]) == (5, 2, 1, 2)
    # win rate vs base from the games: 2 / 4 = 0.5, Wilson 95% [0.1500, 0.8500] by hand
    vs = c1["win_rate_vs"]["base"]
    assert (vs["wins"], vs["draws"], vs["losses"], vs["n"], vs["k"]) == (2, 1, 1, 4, 2)
    assert vs["rate"] == 0.5
    assert abs(vs["lo"] - 0.1500) < 1e-3 and abs(vs["hi"] - 0.8500) < 1e-3
    # score (2 + 1/2) / 4 = 0.625, Wilson 95% [0.2194, 0.9081]
    assert vs["score"]["k"] == 2.5 and vs["score"]["rate"] == 0.625
    assert abs(vs["score"]["lo"] - 0.2194) < 1e-3 and abs(vs["score"]["hi"] - 0.9081) < 1e-3
    # ckpt-0: 0 of 1, Wilson [0, 0.7935]
    vs0 = models["ckpt-0"]["win_rate_vs"]["base"]
    assert (vs0["wins"], vs0["draws"], vs0["losses"], vs0["n"]) == (0, 0, 1, 1)
    assert vs0["lo"] == 0.0 and abs(vs0["hi"] - 0.7935) < 1e-3
    assert models["base"]["win_rate_vs"] == {}
    assert (out / "leaderboard.png").stat().st_size > 1000


def test_leaderboard_table_and_picture_in_the_run_dir(tmp_path):
    make_run(tmp_path)
    result = CliRunner().invoke(cli, ["leaderboard", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ckpt-1" in result.output and "0.50 [0.15,0.85] 2/1/1 score 0.62" in result.output
    assert "2/1/1 + 1 self" in result.output  # its mirror game, in its 5 games but in no W/D/L
    assert (tmp_path / "leaderboard.png").is_file()


def test_leaderboard_of_a_folder_that_is_no_run_says_so(tmp_path):
    result = CliRunner().invoke(cli, ["leaderboard", str(tmp_path)])
    assert result.exit_code == 2
    assert "has no league.json" in result.output and "Traceback" not in result.output


def test_games_of_unstable_eval_under_eval_count_too(tmp_path):
    make_run(tmp_path)
    tracker = Recorder(
        tmp_path / "eval" / "20261122-120000"
    )  # where `unstable eval RUN_DIR` writes its games
    tracker.add_game(play(100, {0: "ckpt-1", 1: "random"}, {0: 1.0, 1: -1.0}))
    tracker.add_game(play(101, {0: "random", 1: "ckpt-1"}, {0: 1.0, 1: -1.0}))
    tracker.close()
    result = CliRunner().invoke(cli, ["leaderboard", str(tmp_path), "--json"])
    models = {m["uid"]: m for m in json.loads(result.output)["models"]}
    vs = models["ckpt-1"]["win_rate_vs"]
    assert (vs["random"]["wins"], vs["random"]["losses"], vs["random"]["n"]) == (1, 1, 2)
    assert vs["base"]["n"] == 4  # the run's own games, unchanged
