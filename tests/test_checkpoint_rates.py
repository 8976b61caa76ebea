"""Rates per checkpoint from a games.jsonl written here: steps by version, wins against fixed opponents."""

import json

import pytest

from unstable_core.report.checkpoint_rates import compare_quarters, rates_by_version


def game(models, rewards, steps=(), eval_=False, failed=False):
    """A games.jsonl record: `steps` are (pid, version, invalid, format_ok) of collected seats."""
    trajs = {}
    for pid, version, invalid, fmt in steps:
        trajs.setdefault(pid, []).append(
            {"policy_version": version, "invalid_move": invalid, "format_ok": fmt}
        )
    return {
        "info": {
            "models": {str(p): m for p, m in models.items()},
            "final_rewards": {str(p): r for p, r in rewards.items()},
            "eval": eval_,
            "failed": failed,
        },
        "trajectories": [{"pid": p, "collect_data": True, "steps": s} for p, s in trajs.items()],
    }


def write(tmp_path, games):
    (tmp_path / "games").mkdir()
    (tmp_path / "games" / "games.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    return tmp_path


def test_rates_per_version_and_win_rates_against_fixed_opponents(tmp_path):
    run = write(
        tmp_path,
        [
            # mirror self-play of ckpt-0: 3 steps, one invalid, two formatted; no win rate
            game(
                {0: "ckpt-0", 1: "ckpt-0"},
                {0: 1, 1: -1},
                [(0, 0, False, True), (1, 0, True, False), (0, 0, False, True)],
            ),
            # evaluation: ckpt-0 loses to base, ckpt-1 wins once and draws once
            game({0: "ckpt-0", 1: "base"}, {0: -1, 1: 1}, eval_=True),
            game({0: "base", 1: "ckpt-1"}, {0: -1, 1: 1}, eval_=True),
            game({0: "ckpt-1", 1: "base"}, {0: 0, 1: 0}, eval_=True),
            game({0: "ckpt-1", 1: "ckpt-1"}, {0: 0, 1: 0}, [(0, 1, False, True)]),
            game({0: "ckpt-1", 1: "base"}, {}, [(0, 1, True, True)], failed=True),  # failed: left out
        ],
    )
    rates = rates_by_version(run)
    assert sorted(rates) == [0, 1]
    assert (rates[0].steps, rates[0].invalid, rates[0].formatted) == (3, 1, 2)
    assert rates[0].win_rate("base").k == 0 and rates[0].win_rate("base").n == 1
    assert rates[1].win_rate("base").k == 1 and rates[1].win_rate("base").n == 2  # a draw is no win
    assert rates[1].score("base").k == 1.5 and rates[1].wdl("base") == (1, 1, 0)
    assert rates[1].to_dict()["score"]["base"]["rate"] == 0.75
    assert rates[1].invalid_rate.n == 1


def test_compare_quarters_tests_each_rate(tmp_path):
    games = []
    for v in range(8):  # the invalid-move rate falls from 0.8 to 0.1 over the versions
        for i in range(50):
            bad = i < (40 if v < 2 else 5)
            games.append(game({0: f"ckpt-{v}", 1: f"ckpt-{v}"}, {0: 0, 1: 0}, [(0, v, bad, True)]))
    cmp = compare_quarters(rates_by_version(write(tmp_path, games)))
    first, last = cmp.quarters["invalid_move_rate"]
    assert first.versions == [0, 1] and last.versions == [6, 7]
    test = cmp.tests["invalid_move_rate"]
    assert test.first.rate == pytest.approx(0.8) and test.second.rate == pytest.approx(0.1)
    assert test.z < -8 and test.p_value < 1e-10
    assert cmp.tests["format_rate"].p_value == 1.0  # always formatted: nothing to test
    assert compare_quarters({}).tests == {}


def test_compare_quarters_tests_the_strict_win_rate_and_keeps_the_score(tmp_path):
    """Versions 0-1 draw every game against base, 6-7 win half and draw half: the test is on W / n (0 of 8
    -> 4 of 8, whole counts, so Fisher's exact test), the score (0.5 -> 0.75) is reported, not tested."""
    games = []
    for v in range(8):
        for i in range(4):
            win = v >= 6 and i % 2 == 0
            games.append(
                game({0: f"ckpt-{v}", 1: "base"}, {0: 1 if win else 0, 1: -1 if win else 0}, eval_=True)
            )
    cmp = compare_quarters(rates_by_version(write(tmp_path, games)))
    test = cmp.tests["win_rate_vs_base"]
    assert (test.first.k, test.first.n, test.second.k, test.second.n) == (0, 8, 4, 8)
    assert test.method == "fisher" and not any(name.startswith("score") for name in cmp.tests)
    first, last = cmp.quarters["win_rate_vs_base"]
    assert (first.score("base").rate, last.score("base").rate) == (0.5, 0.75)
    assert last.to_dict()["score"]["base"]["k"] == 6
    assert cmp.to_dict()["win_rate_vs_base"]["last_versions"] == [6, 7]


def test_step_rates_are_tested_clustered_by_game_seat(tmp_path):
    """Each seat's moves in a game form one cluster: every invalid move of the first versions sits in the
    same few seats, so the evidence is that of those seats, not of every move."""
    games = []
    for v in range(8):
        for i in range(10):
            bad = v < 2 and i < 3  # 3 seats of 4 moves, all invalid, per early version
            steps = [(0, v, bad, True)] * 4
            games.append(game({0: f"ckpt-{v}", 1: f"ckpt-{v}"}, {0: 0, 1: 0}, steps))
    rates = rates_by_version(write(tmp_path, games))
    assert rates[0].seats[:4] == [(4, 4, 4)] * 3 + [(4, 0, 4)]
    cmp = compare_quarters(rates)
    test = cmp.tests["invalid_move_rate"]
    assert test.method == "cluster-z" and (test.first.k, test.first.n) == (24, 80)
    assert test.p_value > 0.001  # as plain trials, 24 of 80 against 0 of 80 would read p < 1e-7


def test_each_rate_compares_the_checkpoints_that_have_data_for_it(tmp_path):
    """Mirror self-play with scheduled evaluation: ckpt-0 plays no evaluation and the last checkpoint no
    training game. Before: both quarters pooled every version, so the last quarter (ckpt-4) had no turns
    and the first (ckpt-0) no games against base: no test of anything."""
    games = []
    for v in range(4):  # training: invalid moves fall from 9 in 10 to 1 in 10
        for i in range(10):
            bad = i < (9 if v == 0 else 1)
            games.append(game({0: f"ckpt-{v}", 1: f"ckpt-{v}"}, {0: 0, 1: 0}, [(0, v, bad, True)]))
    for v in range(1, 5):  # scheduled evaluation of ckpt-1 to ckpt-4 against base
        games.append(game({0: f"ckpt-{v}", 1: "base"}, {0: 1, 1: -1}, eval_=True))
    cmp = compare_quarters(rates_by_version(write(tmp_path, games)))
    assert cmp.versions == {
        "invalid_move_rate": [0, 1, 2, 3],
        "format_rate": [0, 1, 2, 3],
        "win_rate_vs_base": [1, 2, 3, 4],
    }
    first, last = cmp.quarters["invalid_move_rate"]
    assert (first.versions, last.versions) == ([0], [3])
    test = cmp.tests["invalid_move_rate"]
    assert (test.first.k, test.first.n, test.second.k, test.second.n) == (9, 10, 1, 10)
    assert [q.versions for q in cmp.quarters["win_rate_vs_base"]] == [[1], [4]]


def test_a_rate_with_data_in_one_checkpoint_has_no_test(tmp_path):
    games = [game({0: "ckpt-0", 1: "ckpt-0"}, {0: 0, 1: 0}, [(0, 0, True, True)])]
    games.append(game({0: "ckpt-1", 1: "base"}, {0: 1, 1: -1}, eval_=True))
    cmp = compare_quarters(rates_by_version(write(tmp_path, games)))
    assert cmp.versions["invalid_move_rate"] == [0] and cmp.versions["win_rate_vs_base"] == [1]
    assert cmp.tests == {} and cmp.quarters == {}
