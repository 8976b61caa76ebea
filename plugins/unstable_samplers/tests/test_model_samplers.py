"""Opponent samplers against a real League: candidates, exact probabilities, seeded draws, errors."""

import math
from collections import Counter

import pytest
from unstable_samplers.model import (
    AsynchronousModelSampler,
    FixedOpponentModelSampler,
    MirrorModelSampler,
    TrueSkillModelSampler,
    WinRateModelSampler,
)

from unstable_core.errors import UnstableError
from unstable_core.league.league import League

BETA = 4.0


def registry(num_ckpts=3, fixed=("opp-b", "opp-a")):
    reg = League(beta=BETA)
    for it in range(num_ckpts):
        reg.add_checkpoint(f"ckpt-{it}", f"ckpts/{it}", iteration=it)
    for name in fixed:
        reg.add_fixed(name)
    return reg


def frequencies(draws):
    return {k: v / len(draws) for k, v in Counter(draws).items()}


def test_mirror_returns_the_current_checkpoint():
    assert MirrorModelSampler().sample_opponent(registry()) == "ckpt-2"
    with pytest.raises(UnstableError, match="no checkpoint yet"):
        MirrorModelSampler().sample_opponent(registry(num_ckpts=0))
    with pytest.raises(UnstableError, match="MirrorModelSampler got unknown option.*k"):
        MirrorModelSampler(k=3)


def test_fixed_draws_uniformly_over_active_fixed_models():
    reg = registry()
    reg.update_ratings(["ckpt-2"], [1.0], env_id="Solo-v0")  # adds the inactive dummy 'fixed-env'
    sampler = FixedOpponentModelSampler(seed=3)
    assert sampler.candidates(reg) == ["opp-a", "opp-b"]
    assert FixedOpponentModelSampler(include_current_ckpt=True).candidates(reg) == [
        "opp-a",
        "opp-b",
        "ckpt-2",
    ]
    freq = frequencies([sampler.sample_opponent(reg) for _ in range(2000)])
    assert set(freq) == {"opp-a", "opp-b"}
    assert freq["opp-a"] == pytest.approx(0.5, abs=0.04)


def test_fixed_without_fixed_opponents_names_the_option():
    with pytest.raises(UnstableError, match="add one with --fixed-opponent"):
        FixedOpponentModelSampler().sample_opponent(registry(fixed=()))


def test_lagged_draws_from_the_last_k_checkpoints():
    reg = registry(num_ckpts=5)
    sampler = AsynchronousModelSampler(seed=1, k=2)
    assert sampler.candidates(reg) == ["ckpt-3", "ckpt-4"]
    assert AsynchronousModelSampler(k=10).candidates(reg) == [f"ckpt-{i}" for i in range(5)]
    freq = frequencies([sampler.sample_opponent(reg) for _ in range(2000)])
    assert set(freq) == {"ckpt-3", "ckpt-4"}
    assert freq["ckpt-3"] == pytest.approx(0.5, abs=0.04)
    with pytest.raises(UnstableError, match="k must be an integer >= 1"):
        AsynchronousModelSampler(k=0)
    with pytest.raises(UnstableError, match="no checkpoint yet"):
        sampler.sample_opponent(registry(num_ckpts=0))


def quality(mu_a, s_a, mu_b, s_b):
    """TrueSkill 1v1 match quality: sqrt(2 b^2 / d) exp(-(mu_a - mu_b)^2 / (2 d)), d = 2 b^2 + s_a^2 + s_b^2."""
    d = 2 * BETA**2 + s_a**2 + s_b**2
    return math.sqrt(2 * BETA**2 / d) * math.exp(-((mu_a - mu_b) ** 2) / (2 * d))


def test_trueskill_probabilities_are_proportional_to_match_quality():
    reg = registry(num_ckpts=2, fixed=("weak", "strong"))
    reg.update_ratings(["ckpt-1"], [1.0], env_id="Solo-v0")  # the dummy must never be a candidate
    ratings = {"ckpt-0": (20.0, 4.0), "ckpt-1": (26.0, 3.0), "weak": (10.0, 2.0), "strong": (27.0, 6.0)}
    for uid, (mu, sigma) in ratings.items():
        reg._models[uid].mu, reg._models[uid].sigma = mu, sigma
    q = {uid: quality(26.0, 3.0, *ratings[uid]) for uid in ("ckpt-0", "weak", "strong")}
    total = sum(q.values())
    probs = TrueSkillModelSampler().probabilities(reg)
    assert set(probs) == {"ckpt-0", "weak", "strong"}
    for uid in q:
        assert probs[uid] == pytest.approx(q[uid] / total, rel=1e-9)
    assert probs["strong"] > probs["ckpt-0"] > probs["weak"]
    sampler = TrueSkillModelSampler(seed=5)
    freq = frequencies([sampler.sample_opponent(reg) for _ in range(4000)])
    for uid in q:
        assert freq.get(uid, 0.0) == pytest.approx(q[uid] / total, abs=0.03)


def test_trueskill_with_only_the_current_checkpoint_plays_itself():
    reg = registry(num_ckpts=1, fixed=())
    assert TrueSkillModelSampler().probabilities(reg) == {"ckpt-0": 1.0}
    assert TrueSkillModelSampler().sample_opponent(reg) == "ckpt-0"
    with pytest.raises(UnstableError, match="no checkpoint yet"):
        TrueSkillModelSampler().sample_opponent(registry(num_ckpts=0))


def test_same_seed_same_opponents():
    reg = registry(num_ckpts=4)
    for cls in (FixedOpponentModelSampler, AsynchronousModelSampler, TrueSkillModelSampler):
        a, b = cls(seed=11), cls(seed=11)
        assert [a.sample_opponent(reg) for _ in range(30)] == [b.sample_opponent(reg) for _ in range(30)]


def played(learner_pid: int, opponent: str, outcome: float, *, eval: bool = False, failed: bool = False):
    """A finished 2-seat game of the learner (ckpt-2) against `opponent`: outcome 1 win, 0 draw, -1 loss."""
    from unstable_core.types import GameInformation

    other = 1 - learner_pid
    return GameInformation(
        game_idx=0, env_id="E", eval=eval, failed=failed, learner_pids=[learner_pid],
        models={learner_pid: "ckpt-2", other: opponent}, final_rewards={learner_pid: outcome, other: -outcome},
    )  # fmt: skip


def test_win_rate_probabilities_follow_the_documented_formula():
    """p(c) = exp(-|w(c) - target| / T) / Z with w(c) = (S + 1) / (n + 2) over the last `window` games."""
    sampler = WinRateModelSampler(seed=0, target=0.7, temperature=0.2, window=4, k=1)
    league = registry(num_ckpts=3)  # candidates: opp-a, opp-b (fixed, by uid) and ckpt-1 (k=1, not current)
    for outcome in (1, 1, 1, -1, -1, 0):  # opp-a: the last 4 only (window): 1, -1, -1, 0 -> S = 1.5
        sampler.update(played(0, "opp-a", outcome))
    for outcome in (1, 1, 1):  # opp-b: S = 3, n = 3
        sampler.update(played(1, "opp-b", outcome))
    sampler.update(played(0, "opp-a", 1, eval=True))  # evaluation and failed games do not count
    sampler.update(played(0, "opp-b", -1, failed=True))
    w = {"opp-a": 2.5 / 6, "opp-b": 4 / 5, "ckpt-1": 0.5}
    assert {uid: sampler.win_rate(uid) for uid in w} == pytest.approx(w)
    weights = {uid: math.exp(-abs(v - 0.7) / 0.2) for uid, v in w.items()}
    total = sum(weights.values())
    probs = sampler.probabilities(league)
    assert list(probs) == ["opp-a", "opp-b", "ckpt-1"]
    assert probs == pytest.approx({uid: x / total for uid, x in weights.items()})

    draws = [sampler.sample_opponent(league) for _ in range(20000)]
    chi2 = sum((Counter(draws)[uid] - 20000 * p) ** 2 / (20000 * p) for uid, p in probs.items())
    assert chi2 < 13.8  # chi-square, 2 degrees of freedom, p = 0.001


def test_win_rate_keeps_its_scores_across_a_resume_and_checks_its_options():
    sampler = WinRateModelSampler(seed=0, window=2)
    for outcome in (1, -1, 0):
        sampler.update(played(0, "opp-a", outcome))
    again = WinRateModelSampler(seed=0, window=2)
    again.load_state_dict(sampler.state_dict())
    assert again.scores == sampler.scores == {"opp-a": [0.0, 0.5]}
    assert WinRateModelSampler(k=3).adapters_in_play() == 4
    assert WinRateModelSampler().candidates(registry(num_ckpts=1, fixed=())) == ["ckpt-0"]  # alone: itself
    for bad in ({"target": 1.5}, {"temperature": 0}, {"window": 0}, {"k": 2.5}):
        with pytest.raises(UnstableError, match=f"WinRateModelSampler: {next(iter(bad))} must be"):
            WinRateModelSampler(**bad)
