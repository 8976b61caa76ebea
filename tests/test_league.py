"""League: TrueSkill updates checked against the closed-form 1v1 formulas, bookkeeping, persistence."""

import json
import math
from statistics import NormalDist

import pytest

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.league.league import League

N = NormalDist()
BETA, SIGMA0, TAU, P_DRAW = 4.0, 25.0 / 3, 25.0 / 300, 0.1


def _draw_margin() -> float:
    """TrueSkill's draw margin of a 1v1 game: Phi^-1((p + 1) / 2) * sqrt(2) * beta."""
    return N.inv_cdf((P_DRAW + 1) / 2) * math.sqrt(2) * BETA


def expected_win(mu_w: float, s_w: float, mu_l: float, s_l: float) -> tuple[float, float, float, float]:
    """Herbrich et al.'s 1v1 update for a win (tau added to each sigma first, as trueskill does)."""
    var_w, var_l = s_w**2 + TAU**2, s_l**2 + TAU**2
    c = math.sqrt(2 * BETA**2 + var_w + var_l)
    t, e = (mu_w - mu_l) / c, _draw_margin() / c
    v = N.pdf(t - e) / N.cdf(t - e)
    w = v * (v + t - e)
    return (
        mu_w + var_w / c * v,
        math.sqrt(var_w * (1 - var_w / c**2 * w)),
        mu_l - var_l / c * v,
        math.sqrt(var_l * (1 - var_l / c**2 * w)),
    )


def expected_draw_sigma(s_a: float, s_b: float) -> float:
    """Sigma of player a after a draw between equal means: v = 0, w = 2 e pdf(e) / (2 Phi(e) - 1)."""
    var_a, var_b = s_a**2 + TAU**2, s_b**2 + TAU**2
    c = math.sqrt(2 * BETA**2 + var_a + var_b)
    e = _draw_margin() / c
    w = 2 * e * N.pdf(e) / (2 * N.cdf(e) - 1)
    return math.sqrt(var_a * (1 - var_a / c**2 * w))


def league_with(*uids: str) -> League:
    league = League(beta=BETA)
    for uid in uids:
        league.add_fixed(uid)
    return league


def test_scores_to_ranks_higher_score_is_better_and_ties_share():
    assert League._scores_to_ranks([1.0, -1.0]) == [0, 1]
    assert League._scores_to_ranks([-1.0, 1.0]) == [1, 0]
    assert League._scores_to_ranks([3.0, 1.0, 3.0]) == [0, 2, 0]
    assert League._scores_to_ranks([0.0, 0.0]) == [0, 0]
    assert League._scores_to_ranks([0.5, 2.0, -1.0]) == [1, 0, 2]


def test_one_vs_one_win_matches_the_closed_form_update():
    league = league_with("a", "b")
    league.update_ratings(["b", "a"], [-1.0, 1.0], env_id="TicTacToe-v0")
    a, b = league.get_model("a"), league.get_model("b")
    mu_w, s_w, mu_l, s_l = expected_win(25.0, SIGMA0, 25.0, SIGMA0)
    assert a.mu > 25.0 > b.mu
    assert a.mu == pytest.approx(mu_w, abs=1e-6) and a.sigma == pytest.approx(s_w, abs=1e-6)
    assert b.mu == pytest.approx(mu_l, abs=1e-6) and b.sigma == pytest.approx(s_l, abs=1e-6)
    assert (a.games, a.wins, a.draws, a.losses) == (1, 1, 0, 0)
    assert (b.games, b.wins, b.draws, b.losses) == (1, 0, 0, 1)


def test_second_win_uses_the_updated_ratings():
    league = league_with("a", "b")
    league.update_ratings(["a", "b"], [1.0, 0.0], env_id="g")
    a0, b0 = league.get_model("a"), league.get_model("b")
    league.update_ratings(["a", "b"], [1.0, 0.0], env_id="g")
    mu_w, s_w, mu_l, s_l = expected_win(a0.mu, a0.sigma, b0.mu, b0.sigma)
    assert league.get_model("a").mu == pytest.approx(mu_w, abs=1e-6)
    assert league.get_model("b").sigma == pytest.approx(s_l, abs=1e-6)


def test_tie_keeps_equal_mus_equal_and_shrinks_sigmas():
    league = league_with("a", "b")
    league.update_ratings(["a", "b"], [0.0, 0.0], env_id="g")
    a, b = league.get_model("a"), league.get_model("b")
    assert a.mu == pytest.approx(25.0, abs=1e-9) and b.mu == pytest.approx(25.0, abs=1e-9)
    # 1e-5: trueskill's draw path uses its own approximations of the normal cdf and pdf
    assert a.sigma < SIGMA0 and a.sigma == pytest.approx(expected_draw_sigma(SIGMA0, SIGMA0), abs=1e-5)
    assert (a.draws, b.draws, a.wins, b.losses) == (1, 1, 0, 0)


def test_three_players_are_ordered_by_rank():
    league = league_with("first", "second", "third")
    league.update_ratings(["third", "first", "second"], [-1.0, 1.0, 0.0], env_id="g")
    m = league.get_all_models()
    assert m["first"].mu > m["second"].mu > m["third"].mu
    # symmetric priors: the middle player stays at the prior mean, the others move by the same amount
    assert m["second"].mu == pytest.approx(25.0, abs=1e-3)
    assert m["first"].mu - 25.0 == pytest.approx(25.0 - m["third"].mu, abs=1e-3)
    assert [m[u].wins for u in ("first", "second", "third")] == [1, 0, 0]
    assert [m[u].losses for u in ("first", "second", "third")] == [0, 1, 1]


def test_one_player_game_is_rated_against_an_inactive_dummy_that_scored_zero():
    league = League(beta=BETA)
    league.add_checkpoint("ckpt-0", None, iteration=0)
    league.update_ratings(["ckpt-0"], [1.0], env_id="Sudoku-v0")
    dummy = league.get_model("fixed-env")
    assert (dummy.kind, dummy.path_or_name, dummy.active) == ("fixed", "fixed-env", False)
    mu_w, s_w, mu_l, _ = expected_win(25.0, SIGMA0, 25.0, SIGMA0)
    assert league.get_model("ckpt-0").mu == pytest.approx(mu_w, abs=1e-6)
    assert dummy.mu == pytest.approx(mu_l, abs=1e-6)
    league.update_ratings(["ckpt-0"], [0.0], env_id="Sudoku-v0")
    league.update_ratings(["ckpt-0"], [-0.5], env_id="Sudoku-v0", dummy_uid="other-dummy")
    ck = league.get_model("ckpt-0")
    assert (ck.games, ck.wins, ck.draws, ck.losses) == (3, 1, 1, 1)
    assert league.get_model("other-dummy").wins == 1
    assert league.get_match_counts() == {("ckpt-0", "fixed-env"): 2, ("ckpt-0", "other-dummy"): 1}


def test_mirror_self_play_counts_the_game_but_leaves_the_rating():
    league = League(beta=BETA)
    league.add_checkpoint("ckpt-0", None, iteration=0)
    before = league.get_model("ckpt-0")
    league.update_ratings(["ckpt-0", "ckpt-0"], [1.0, -1.0], env_id="g")
    after = league.get_model("ckpt-0")
    assert (after.mu, after.sigma) == (before.mu, before.sigma)
    assert (after.games, after.wins, after.draws, after.losses) == (1, 0, 0, 0)
    assert league.get_match_counts() == {("ckpt-0", "ckpt-0"): 1}
    assert "fixed-env" not in league.get_all_models()


def test_a_model_with_several_seats_is_rated_once_on_its_mean_score():
    league = league_with("a", "b")
    # a: mean(1, 0) = 0.5 beats b's 0.2, so this is one 1v1 win of a over b
    league.update_ratings(["a", "b", "a"], [1.0, 0.2, 0.0], env_id="g")
    mu_w, _, mu_l, _ = expected_win(25.0, SIGMA0, 25.0, SIGMA0)
    assert league.get_model("a").mu == pytest.approx(mu_w, abs=1e-6)
    assert league.get_model("b").mu == pytest.approx(mu_l, abs=1e-6)
    assert league.get_model("a").games == 1
    assert league.get_match_counts() == {("a", "b"): 1}


def test_match_counts_are_per_unordered_pair():
    league = league_with("a", "b", "c")
    league.update_ratings(["a", "b"], [1, 0], env_id="g1")
    league.update_ratings(["b", "a"], [1, 0], env_id="g1")
    league.update_ratings(["c", "a", "b"], [0, 1, 2], env_id="g2")
    assert league.get_match_counts() == {("a", "b"): 3, ("a", "c"): 1, ("b", "c"): 1}
    assert league.get_env_games() == {"g1": 2, "g2": 1}


def test_add_checkpoint_inherits_mu_and_doubles_sigma_capped_at_the_prior():
    league = League(beta=BETA)
    league.add_checkpoint("ckpt-0", None, iteration=0)
    assert league.get_current_ckpt() == "ckpt-0"
    m0 = league._models["ckpt-0"]
    m0.mu, m0.sigma = 30.0, 3.0
    league.add_checkpoint("ckpt-1", "/runs/x/checkpoints/step-1", iteration=1)
    ck1 = league.get_model("ckpt-1")
    assert (ck1.mu, ck1.sigma, ck1.iteration) == (30.0, 6.0, 1)
    assert league.get_current_ckpt() == "ckpt-1"
    assert league.get_name_or_lora_path("ckpt-1") == "/runs/x/checkpoints/step-1"
    league._models["ckpt-1"].sigma = 5.0  # 2 * 5 = 10 > 25/3: capped
    league.add_checkpoint("ckpt-2", "p2", iteration=2)
    assert league.get_model("ckpt-2").sigma == pytest.approx(SIGMA0)
    assert league.get_model("ckpt-2").mu == 30.0
    league.add_checkpoint("fresh", "p3", iteration=3, inherit=False)
    assert (league.get_model("fresh").mu, league.get_model("fresh").sigma) == (25.0, SIGMA0)


def test_checkpoint_uids_are_in_iteration_order_and_exclude_fixed_models():
    league = League()
    league.add_checkpoint("late", "p", iteration=5)
    league.add_fixed("opponent")
    league.add_checkpoint("early", "p", iteration=2)
    assert league.checkpoint_uids() == ["early", "late"]
    assert league.get_current_ckpt() == "early"  # the newest added, whatever its iteration


def test_add_fixed_sets_name_and_prior_and_is_idempotent():
    league = League()
    league.add_fixed("google/gemma-3-1b-it", prior_mu=20.0)
    league.add_fixed("google/gemma-3-1b-it", prior_mu=99.0)
    m = league.get_model("google/gemma-3-1b-it")
    assert (m.kind, m.path_or_name, m.mu, m.sigma, m.active) == (
        "fixed",
        "google/gemma-3-1b-it",
        20.0,
        SIGMA0,
        True,
    )
    assert league.get_current_ckpt() is None


def test_quality_matches_the_1v1_formula():
    league = league_with("a", "b")
    league._models["a"].mu, league._models["a"].sigma = 30.0, 2.0
    league._models["b"].mu, league._models["b"].sigma = 24.0, 3.0
    denom = 2 * BETA**2 + 2.0**2 + 3.0**2
    expected = math.sqrt(2 * BETA**2 / denom) * math.exp(-((30.0 - 24.0) ** 2) / (2 * denom))
    assert league.quality("a", "b") == pytest.approx(expected, rel=1e-9)
    assert league.quality("b", "a") == pytest.approx(expected, rel=1e-9)


def test_get_all_models_is_a_deep_copy():
    league = league_with("a")
    league.get_all_models()["a"].mu = 99.0
    assert league.get_model("a").mu == 25.0


def test_find_reads_one_model_without_a_copy_and_none_for_an_unknown_uid():
    league = league_with("a")
    assert league.find("a") == league.get_model("a") and league.find("a") is league.find("a")
    assert league.find("nobody") is None


def test_json_round_trip_through_a_file(tmp_path):
    league = League(beta=BETA, draw_probability=0.2)
    league.add_checkpoint("ckpt-0", None, iteration=0)
    league.add_fixed("opp", prior_mu=22.0)
    league.update_ratings(["ckpt-0", "opp"], [1, 0], env_id="g")
    league.update_ratings(["ckpt-0"], [0], env_id="solo")
    league.add_checkpoint("ckpt-1", "ckpts/1", iteration=1)
    path = tmp_path / "run" / "league.json"
    league.save(path)
    assert json.loads(path.read_text())["current"] == "ckpt-1"
    assert [p.name for p in path.parent.iterdir()] == ["league.json"]  # no temporary file left
    loaded = League.load(path)
    assert loaded == league
    assert loaded.get_all_models() == league.get_all_models()
    assert loaded.get_match_counts() == {("ckpt-0", "opp"): 1, ("ckpt-0", "fixed-env"): 1}
    assert loaded.env.draw_probability == pytest.approx(0.2)
    # the loaded league rates exactly like the original
    league.update_ratings(["ckpt-1", "opp"], [0, 1], env_id="g")
    loaded.update_ratings(["ckpt-1", "opp"], [0, 1], env_id="g")
    assert loaded == league


def test_unknown_uid_names_it_and_the_known_ones():
    league = league_with("a", "b")
    with pytest.raises(UnstableError, match=r"unknown model uid 'zzz'; the league knows: a, b"):
        league.update_ratings(["a", "zzz"], [1, 0], env_id="g")
    with pytest.raises(UnstableError, match="'zzz'"):
        league.get_name_or_lora_path("zzz")
    with pytest.raises(UnstableError, match="'zzz'"):
        league.quality("a", "zzz")
    assert league.get_model("a").games == 0  # nothing was counted


@pytest.mark.parametrize(
    ("uids", "scores", "env_id", "match"),
    [
        (["a", "b"], [1.0], "g", "one score per seat"),
        ([], [], "g", "one score per seat"),
        (["a", "b"], [1.0, float("nan")], "g", "finite numbers"),
        (["a", "b"], [1.0, "x"], "g", "finite numbers"),
        (["a", "b"], [1.0, 0.0], "", "env_id"),
        (["fixed-env"], [1.0], "g", "dummy opponent"),
    ],
)
def test_bad_games_are_rejected(uids, scores, env_id, match):
    league = league_with("a", "b")
    league.add_fixed("fixed-env")
    with pytest.raises(UnstableError, match=match):
        league.update_ratings(uids, scores, env_id=env_id)


def test_bad_models_and_config_are_rejected(tmp_path):
    league = League()
    league.add_checkpoint("c", None, iteration=0)
    with pytest.raises(UnstableError, match="already registered"):
        league.add_checkpoint("c", None, iteration=1)
    with pytest.raises(UnstableError, match="already registered"):
        league.add_fixed("c")
    with pytest.raises(UnstableError, match="iteration"):
        league.add_checkpoint("d", None, iteration=-1)
    with pytest.raises(ConfigError, match="draw_probability"):
        League(draw_probability=1.0)
    with pytest.raises(ConfigError, match="beta"):
        League(beta=0.0)
    with pytest.raises(UnstableError, match="does not exist"):
        League.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UnstableError, match="not valid JSON"):
        League.load(tmp_path / "bad.json")
    (tmp_path / "old.json").write_text(json.dumps({"format_version": 0}))
    with pytest.raises(UnstableError, match="format_version"):
        League.load(tmp_path / "old.json")


def test_an_upset_trueskill_cannot_compute_keeps_ratings_and_counts_the_game():
    league = league_with("a", "b")
    league._models["a"].mu, league._models["a"].sigma = -500.0, 0.5
    league._models["b"].mu, league._models["b"].sigma = 500.0, 0.5
    league.update_ratings(["a", "b"], [1, 0], env_id="g")
    a = league.get_model("a")
    assert (a.mu, a.sigma, a.wins) == (-500.0, 0.5, 1)


def test_the_learner_step_is_the_current_checkpoints():
    league = League()
    assert league.learner_step() == 0  # before the first checkpoint
    league.add_checkpoint("ckpt-0", None, 0)
    league.add_fixed("random")
    league.add_checkpoint("ckpt-7", "checkpoints/step-7", 7)
    assert league.learner_step() == 7
