"""Scheduled evaluation (--eval-every): the games of a checkpoint (seats alternated, the same seeds for every
checkpoint), their summary against hand-computed counts and intervals, the curves, progress and summary.
A real collector playing them beside training games is tested in test_runtime.py."""

import pytest

from unstable_core.plugins import get_registry
from unstable_core.report.scheduled_eval import summarise
from unstable_core.runtime.actors.scheduled_eval import ScheduledEval
from unstable_core.runtime.actors.scheduler import GameScheduler
from unstable_core.types import EvalEnvSpec, GameInformation, GameResult, Step, TrainEnvSpec, Trajectory

TTT = "TicTacToe-v0-train"
PLAN = ScheduledEval(
    (EvalEnvSpec(TTT, 2, fixed_opponent="base"), EvalEnvSpec("Nim-v0-train", 2)), every=2, games=4
)


def scheduler(shard=0, num_shards=1):
    reg = get_registry()
    specs = [TrainEnvSpec(TTT, 2, 2)]
    return GameScheduler(
        reg.load("env_sampler", "random")(specs, seed=0),
        reg.load("model_sampler", "mirror")(seed=0),
        shard=shard,
        num_shards=num_shards,
    )


def test_games_of_a_checkpoint_alternate_seats_and_share_seeds_across_checkpoints():
    s = scheduler()
    first, second = s.scheduled_eval("ckpt-2", PLAN), s.scheduled_eval("ckpt-4", PLAN)
    assert len(first) == len(second) == 8  # 4 games x 2 (env, opponent) pairs
    for games, uid in ((first, "ckpt-2"), (second, "ckpt-4")):
        assert all(g.eval for g in games)
        seats = [next(p.pid for p in g.players if p.model_uid == uid) for g in games]
        assert seats == [0, 1, 0, 1] * 2
        assert all(p.collect_data == (p.model_uid == uid) for g in games for p in g.players)
        assert {p.model_uid for g in games for p in g.players} == {uid, "base"}  # default opponent: base
    assert [g.seed for g in first] == [g.seed for g in second]
    assert len({g.seed for g in first}) == 8
    idx = [g.game_idx for g in first + second]
    assert len(set(idx)) == 16  # the scheduler's indices: unique within the run


def test_checkpoints_due_every_k_steps_one_collector_each():
    assert [v for v in range(9) if PLAN.due(v)] == [2, 4, 6, 8]
    assert [v for v in range(9) if PLAN.due(v, shard=1, num_shards=2)] == [2, 6]
    assert [v for v in range(9) if PLAN.due(v, shard=0, num_shards=2)] == [4, 8]


def result(models, rewards, invalid=(), failed=False):
    info = GameInformation(0, TTT, eval=True, models=models, final_rewards=rewards, failed=failed)
    trajs = [
        Trajectory(
            pid, TTT, uid, [Step(pid, TTT, "", "", invalid_move=pid in invalid, format_ok=pid not in invalid)]
        )
        for pid, uid in models.items()
    ]
    return GameResult(info, trajs)


def test_summary_counts_and_wilson_intervals_by_hand():
    games = [
        result({0: "ckpt-2", 1: "base"}, {0: 1.0, 1: -1.0}),
        result({0: "base", 1: "ckpt-2"}, {0: 0.0, 1: 0.0}, invalid=(1,)),
        result({0: "ckpt-2", 1: "base"}, {0: -1.0, 1: 1.0}, invalid=(0,)),
        result({0: "base", 1: "ckpt-2"}, {0: -1.0, 1: 1.0}),
        result({0: "ckpt-2", 1: "base"}, {}, failed=True),
    ]
    m = summarise("ckpt-2", games)
    key = f"eval/{TTT}/vs_base"
    assert (m[f"{key}/games"], m[f"{key}/failed"]) == (4, 1)
    assert (m[f"{key}/wins"], m[f"{key}/draws"], m[f"{key}/losses"]) == (2, 1, 1)
    assert m[f"{key}/mean_reward"] == 0.25  # (1 + 0 - 1 + 1) / 4
    # win rate 2 / 4 = 0.5, Wilson 95% [0.1500, 0.8500]; a draw is not a win
    assert m[f"{key}/win_rate"] == 0.5
    assert abs(m[f"{key}/win_rate_lo"] - 0.1500) < 1e-3 and abs(m[f"{key}/win_rate_hi"] - 0.8500) < 1e-3
    # score (2 + 1/2) / 4 = 0.625, Wilson 95% [0.2194, 0.9081]
    assert m[f"{key}/score"] == 0.625
    assert abs(m[f"{key}/score_lo"] - 0.2194) < 1e-3 and abs(m[f"{key}/score_hi"] - 0.9081) < 1e-3
    # 2 invalid of 4 steps (the failed game has none): 0.5, Wilson [0.1500, 0.8500]
    assert (m[f"{key}/steps"], m[f"{key}/invalid_move_rate"], m[f"{key}/format_rate"]) == (4, 0.5, 0.5)
    assert abs(m[f"{key}/invalid_move_rate_lo"] - 0.1500) < 1e-3
    failed_only = summarise("ckpt-2", games[-1:])
    assert f"{key}/win_rate" not in failed_only and failed_only[f"{key}/failed"] == 1  # no NaN rate
    assert f"{key}/score" not in failed_only and f"{key}/mean_reward" not in failed_only


def test_curves_draw_the_scheduled_win_rate_per_checkpoint_with_its_band(tmp_path):
    from unstable_core.io import append_jsonl
    from unstable_core.report.plots import _rate_panels, plot_run

    key = f"eval/{TTT}/vs_base"
    records = [{"step": s, "learner/loss": 1.0} for s in (1, 2)] + [
        {"step": s, "time": 0.0, **summarise("ckpt-" + str(s), games)}
        for s, games in (
            (2, [result({0: "ckpt-2", 1: "base"}, {0: 1.0, 1: -1.0})] * 3),
            (1, [result({0: "ckpt-1", 1: "base"}, {0: -1.0, 1: 1.0})] * 3),
        )
    ]
    append_jsonl(tmp_path / "metrics.jsonl", records)
    ((label, xs, rates, los, his),) = _rate_panels(tmp_path, records)
    assert label.startswith("win rate (W/n) vs base") and xs == [1, 2] and rates == [0.0, 1.0]
    assert los[1] == records[2][f"{key}/win_rate_lo"] and his[0] == records[3][f"{key}/win_rate_hi"]
    assert [p.name for p in plot_run(tmp_path)] == ["curves.png"]


def test_eval_every_needs_evaluation_games_in_flight():
    from unstable_core.config import load_config
    from unstable_core.errors import ConfigError

    with pytest.raises(ConfigError, match="num-eval-workers"):
        load_config(None, {"eval_every": 2, "num_eval_workers": 0})
    with pytest.raises(ConfigError, match="eval_every must be >= 1"):
        load_config(None, {"eval_every": 0})


def test_progress_and_summary_show_each_evaluation_with_its_interval():
    from rich.console import Console

    from unstable_core.cli.progress import progress_line
    from unstable_core.report.scheduled_eval import evals_table

    win = [result({0: "ckpt-2", 1: "base"}, {0: 1.0, 1: -1.0})]
    evals = {2: summarise("ckpt-2", win * 3 + [result({0: "base", 1: "ckpt-2"}, {0: 1.0, 1: -1.0})])}
    expected = "0.750 [0.301, 0.954] 3/0/1"  # Wilson 95% of 3 in 4, by hand; W/D/L
    assert progress_line({"evals": evals}, 2).endswith(
        "eval ckpt-2 vs base win 0.75 [0.30, 0.95] W/D/L 3/0/1"
    )
    console = Console(width=200, record=True)
    console.print(evals_table(evals))
    (row,) = [line for line in console.export_text().splitlines() if "ckpt-2" in line]
    assert row.split("│")[2].strip() == "base" and expected in row and "-0.500" not in row
    assert row.split("│")[-2].strip() == "0.500"  # mean reward: (1 + 1 + 1 - 1) / 4


def test_the_trackers_moving_win_rate_counts_wins_and_its_score_draws_as_half(tmp_path):
    """metrics.jsonl's collection/<kind>/<env>/win_rate is W/n and .../score (W + D/2)/n, as everywhere."""
    from unstable_core.runtime.actors.recorder import Recorder

    tracker = Recorder(tmp_path)
    for rewards in ({0: 1.0, 1: -1.0}, {0: 0.0, 1: 0.0}):
        r = result({0: "ckpt-2", 1: "base"}, rewards)
        r.info.learner_pids = [0]
        tracker.add_game(r)
    tracker.close()
    means = tracker.means()
    assert (means[f"eval/{TTT}/win_rate"], means[f"eval/{TTT}/score"]) == (0.5, 0.75)
