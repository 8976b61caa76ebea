"""Tests of unstable-rewards: every transform against values computed by hand in the comments."""

from __future__ import annotations

import json
import math
from importlib import metadata

import pytest
from unstable_rewards import (
    ComposeFinalRewardTransforms,
    ComposeSamplingRewardTransforms,
    ComposeStepRewardTransforms,
    EntropyBonus,
    GroupRelative,
    NormalizeRewards,
    NormalizeRewardsByEnv,
    PenaltyForInvalidMove,
    RewardForFormat,
    RoleAdvantageByEnvFormatter,
    RoleAdvantageFormatter,
    SpiralRAE,
)
from unstable_rewards.plugin import TRANSFORMS

from unstable_core import plugins
from unstable_core.errors import ConfigError, UnstableError
from unstable_core.rewards import stage_of
from unstable_core.types import Step, Trajectory

WIN = {0: 1.0, 1: -1.0}  # seat 0 wins
LOSS = {0: -1.0, 1: 1.0}  # seat 1 wins


def approx(d: dict[int, float]) -> dict[int, object]:
    return {k: pytest.approx(v) for k, v in d.items()}


def json_round_trip(state: dict) -> dict:
    return json.loads(json.dumps(state))


# ---------------------------------------------------------------- final: role-advantage


def test_role_advantage_subtracts_the_updated_ema_per_seat():
    t = RoleAdvantageFormatter(ema_alpha=0.5)
    # b0: 0 -> .5*0 + .5*1 = .5 ; adv 1 - .5 = .5      b1: 0 -> -.5 ; adv -1 + .5 = -.5
    assert t(WIN, "A") == approx({0: 0.5, 1: -0.5})
    # b0: .5 -> .25 + .5 = .75 ; adv .25                 b1: -.75 ; adv -.25
    assert t(WIN, "B") == approx({0: 0.25, 1: -0.25})  # one baseline across envs
    # b0: .75 -> .375 - .5 = -.125 ; adv -1 + .125 = -.875   b1: .125 ; adv .875
    assert t(LOSS, "A") == approx({0: -0.875, 1: 0.875})


def test_role_advantage_default_alpha_is_the_references_tau_and_input_is_not_mutated():
    for t in (RoleAdvantageFormatter(), RoleAdvantageByEnvFormatter()):
        rewards = {0: 1.0}
        # tau = 0.001: b: 0 -> .999*0 + .001*1 = .001 ; adv .999
        assert t(rewards, "E") == approx({0: 0.999})
        assert rewards == {0: 1.0}
        # b: .001 -> .000999 + .001 = .001999 ; adv .998001
        assert t(rewards, "E") == approx({0: 0.998001})
    assert SpiralRAE().ema_alpha == 0.95  # SPIRAL keeps its own


def test_role_advantage_by_env_keeps_one_baseline_per_env():
    t = RoleAdvantageByEnvFormatter(ema_alpha=0.5)
    assert t(WIN, "A") == approx({0: 0.5, 1: -0.5})  # as above
    # env B is fresh: b0: 0 -> .5 ; adv .5    b1: 0 -> 0 ; adv 0
    assert t({0: 1.0, 1: 0.0}, "B") == approx({0: 0.5, 1: 0.0})
    # env A again: b0 .5 -> .75 ; adv .25     b1 -.5 -> -.75 ; adv -.25
    assert t(WIN, "A") == approx({0: 0.25, 1: -0.25})


def test_spiral_rae_reads_the_baseline_before_updating_it():
    t = SpiralRAE(ema_alpha=0.5)
    # b = 0 read first: adv 1, -1 ; then b0 = .5, b1 = -.5
    assert t(WIN, "A") == approx({0: 1.0, 1: -1.0})
    # adv 1 - .5 = .5, -1 + .5 = -.5 ; then b0 = .75, b1 = -.75
    assert t(WIN, "A") == approx({0: 0.5, 1: -0.5})
    # env B has its own baselines, still 0
    assert t(WIN, "B") == approx({0: 1.0, 1: -1.0})
    # adv -1 - .75 = -1.75, 1 + .75 = 1.75 ; then b0 = -.125, b1 = .125
    assert t(LOSS, "A") == approx({0: -1.75, 1: 1.75})
    assert t.baselines["A"] == approx({0: -0.125, 1: 0.125})


def test_spiral_rae_default_alpha_is_0_95():
    t = SpiralRAE()
    assert t({0: 1.0}, "A") == approx({0: 1.0})  # b = 0, then b = .05
    assert t({0: 1.0}, "A") == approx({0: 0.95})  # 1 - .05


@pytest.mark.parametrize("cls", [RoleAdvantageByEnvFormatter, SpiralRAE])
@pytest.mark.parametrize("env_id", [None, ""])
def test_per_env_transforms_need_an_env_id(cls, env_id):
    with pytest.raises(UnstableError, match="env_id"):
        cls()(WIN, env_id)


@pytest.mark.parametrize("cls", [RoleAdvantageFormatter, RoleAdvantageByEnvFormatter, SpiralRAE])
@pytest.mark.parametrize("alpha", [1.0, -0.1, 1.5, "0.9", True, None, math.nan])
def test_ema_alpha_outside_0_1_is_refused(cls, alpha):
    with pytest.raises(ConfigError, match="ema_alpha must be a number in \\[0, 1\\)"):
        cls(ema_alpha=alpha)


def test_ema_alpha_0_is_allowed_and_baseline_is_the_last_reward():
    t = SpiralRAE(ema_alpha=0.0)
    assert t(WIN, "A") == approx({0: 1.0, 1: -1.0})  # b = 0, then b = r
    assert t(LOSS, "A") == approx({0: -2.0, 1: 2.0})  # -1 - 1, 1 + 1


@pytest.mark.parametrize(
    "rewards, match",
    [({0: math.nan}, "finite number"), ({0: "1"}, "finite number"), ({"0": 1.0}, "player ids must be ints")],
)
def test_final_transforms_refuse_bad_rewards(rewards, match):
    t = SpiralRAE()
    with pytest.raises(UnstableError, match=match):
        t({1: 1.0, **rewards}, "A")
    assert t.baselines.get("A", {}) == {}  # nothing was updated by the refused game


@pytest.mark.parametrize(
    "cls, bucket, env_id",
    [(RoleAdvantageFormatter, "*", "A"), (RoleAdvantageByEnvFormatter, "A", "A"), (SpiralRAE, "A", "A")],
)
def test_final_state_is_json_ready_and_round_trips(cls, bucket, env_id):
    t = cls(ema_alpha=0.5)
    t(WIN, env_id)
    t(WIN, env_id)
    state = json_round_trip(t.state_dict())
    assert state == {"baselines": {bucket: {"0": 0.75, "1": -0.75}}}  # b after two wins, as above
    resumed = cls(ema_alpha=0.5)
    resumed.load_state_dict(state)
    assert resumed(LOSS, env_id) == t(LOSS, env_id)


@pytest.mark.parametrize(
    "state, match",
    [
        ({}, "as written by state_dict"),
        ({"baselines": {"A": [1.0]}}, "must map player ids"),
        ({"baselines": {"A": {"x": 1.0}}}, "not an integer"),
        ({"baselines": {"A": {"0": None}}}, "finite number"),
    ],
)
def test_final_load_state_refuses_bad_state(state, match):
    with pytest.raises(UnstableError, match=match):
        SpiralRAE().load_state_dict(state)


# ---------------------------------------------------------------- step


def make_trajectory() -> Trajectory:
    """Three steps: good, badly formatted and invalid, good."""
    steps = [
        Step(pid=0, env_id="A", obs="o", act="a", format_ok=True, invalid_move=False),
        Step(pid=0, env_id="A", obs="o", act="a", format_ok=False, invalid_move=True),
        Step(pid=0, env_id="A", obs="o", act="a", format_ok=True, invalid_move=False),
    ]
    return Trajectory(pid=0, env_id="A", model_uid="m", steps=steps)


def test_reward_for_format_adds_reward_or_penalty():
    traj = make_trajectory()
    t = RewardForFormat(reward=0.25, penalty=-0.5)
    assert t(traj, 0, 1.0) == pytest.approx(1.25)  # 1 + .25
    assert t(traj, 1, 1.0) == pytest.approx(0.5)  # 1 - .5
    assert RewardForFormat()(traj, 1, 1.0) == 1.0  # defaults add 0 either way


def test_penalty_for_invalid_move_adds_penalty_or_reward():
    traj = make_trajectory()
    assert PenaltyForInvalidMove()(traj, 1, 0.0) == -1.0  # default penalty -1
    assert PenaltyForInvalidMove()(traj, 0, 0.0) == 0.0  # default reward 0
    t = PenaltyForInvalidMove(reward=0.1, penalty=-2)  # ints, as TOML gives them, are fine
    assert t(traj, 0, 0.5) == pytest.approx(0.6)  # .5 + .1
    assert t(traj, 1, 0.5) == pytest.approx(-1.5)  # .5 - 2


def test_entropy_bonus_adds_tau_times_the_surprisal_of_a_valid_move_only():
    traj = make_trajectory()
    traj.steps[0].logprobs = [-0.5, -1.5]  # mu(completion) = e^-2
    traj.steps[1].logprobs = [-9.0]  # invalid: no bonus for noise
    t = EntropyBonus(tau=0.25)
    assert t(traj, 0, 1.0) == pytest.approx(1.5)  # 1 + .25 x 2
    assert t(traj, 1, 1.0) == 1.0
    assert t(traj, 2, -1.0) == -1.0  # no log-probs recorded (a scripted seat)
    assert EntropyBonus()(traj, 0, 0.0) == pytest.approx(0.2)  # default tau 0.1


@pytest.mark.parametrize("cls", [RewardForFormat, PenaltyForInvalidMove])
@pytest.mark.parametrize("arg", ["reward", "penalty"])
@pytest.mark.parametrize("value", ["1", True, math.inf, math.nan, None])
def test_step_transform_arguments_must_be_finite_numbers(cls, arg, value):
    with pytest.raises(ConfigError, match=f"{arg} must be a finite number"):
        cls(**{arg: value})


@pytest.mark.parametrize("cls", [RewardForFormat, PenaltyForInvalidMove])
@pytest.mark.parametrize("index", [3, -1, "0"])
def test_step_transforms_refuse_a_bad_step_index(cls, index):
    with pytest.raises(UnstableError, match="step_index must be an int in \\[0, 3\\)"):
        cls()(make_trajectory(), index, 0.0)


# ---------------------------------------------------------------- sampling


def make_steps(rewards: list[float], envs: list[str] | None = None) -> list[Step]:
    envs = envs or ["A"] * len(rewards)
    return [
        Step(pid=0, env_id=e, obs="o", act="a", reward=r, prompt_ids=[1, 2], game_idx=i, turn=i)
        for i, (r, e) in enumerate(zip(rewards, envs, strict=True))
    ]


def grouped_steps(rows: list[tuple[str, int, int, int, float, float]]) -> list[Step]:
    """One step per (group id, game, seat, turn, outcome, shaping); reward = outcome + shaping, as shaped."""
    return [
        Step(pid=pid, env_id="A", obs="o", act="a", reward=out + shp, final_reward=out, shaping=shp,
             prompt_ids=[1, pid, turn], game_idx=game, turn=turn, group_id=group)
        for group, game, pid, turn, out, shp in rows
    ]  # fmt: skip


def test_group_relative_compares_each_trajectory_of_a_group_once_and_keeps_each_steps_shaping():
    steps = grouped_steps(
        [
            ("g0", 0, 0, 0, 1.0, 0.5),  # game 0, seat 0: won in 3 turns
            ("g0", 0, 0, 2, 1.0, 0.0),
            ("g0", 0, 0, 4, 1.0, 0.0),
            ("g0", 1, 0, 0, -1.0, 0.5),  # game 1, seat 0: lost in 1 turn
            ("g0", 2, 0, 0, -1.0, 0.0),  # game 2: lost
            ("g0", 3, 0, 0, 1.0, 0.0),  # game 3: won
            ("g0", 0, 1, 1, -1.0, 0.0),  # seat 1 of the same group: its own group of seats
            ("g0", 1, 1, 1, 1.0, 0.0),
            ("g4", 4, 0, 0, 3.0, 0.0),  # another group, of one game: nothing to compare with
            ("", 5, 0, 0, 2.0, 1.0),  # no group (repeat = 1): a group of one
        ]
    )
    out = GroupRelative()(steps)
    # g0 seat 0: outcomes [1, -1, -1, 1] (game 0 once, not thrice), mean 0; seat 1: [-1, 1], mean 0
    assert [s.reward for s in out] == pytest.approx([1.5, 1.0, 1.0, -0.5, -1.0, 1.0, -1.0, 1.0, 0.0, 1.0])
    assert steps[0].reward == 1.5 and [s.game_idx for s in out] == [s.game_idx for s in steps]  # copies
    z = GroupRelative(z_score=True)(steps[:3] + steps[4:6])  # outcomes [1, -1, 1]: mean 1/3, std 0.943
    sigma = math.sqrt((2 * (2 / 3) ** 2 + (4 / 3) ** 2) / 3)
    assert z[0].reward == pytest.approx((2 / 3) / sigma + 0.5) and z[3].reward == pytest.approx(
        -(4 / 3) / sigma
    )


def test_group_relative_by_prompt_groups_identical_prompt_ids():
    steps = grouped_steps([("", 0, 0, 0, 1.0, 0.0), ("", 1, 0, 0, 0.0, 0.0), ("", 2, 0, 1, 5.0, 0.0)])
    out = GroupRelative(by="prompt")(steps)  # two games with the prompt [1, 0, 0]
    assert [s.reward for s in out] == pytest.approx([0.5, -0.5, 0.0])
    assert [s.reward for s in GroupRelative()(steps)] == [0.0, 0.0, 0.0]  # by seed: three groups of one


def test_group_relative_errors_name_the_fix():
    with pytest.raises(ConfigError, match="by must be one of seed, prompt, got 'turn'"):
        GroupRelative(by="turn")
    with pytest.raises(ConfigError, match="z_score must be true or false"):
        GroupRelative(z_score="yes")
    with pytest.raises(UnstableError, match="reward must be a finite number"):
        GroupRelative()(grouped_steps([("g", 1, 0, 0, math.nan, 0.0)]))


def test_normalize_mean_centres_the_batch():
    steps = make_steps([2, 4, 4, 4, 5, 5, 7, 9])
    out = NormalizeRewards()(steps)
    # mean = 40 / 8 = 5
    assert [s.reward for s in out] == pytest.approx([-3, -1, -1, -1, 0, 0, 2, 4])
    assert [s.reward for s in steps] == [2, 4, 4, 4, 5, 5, 7, 9]  # the input steps are left alone
    assert out[0].prompt_ids == [1, 2] and out[3].turn == 3  # everything else is kept


def test_normalize_z_score_divides_by_the_population_std():
    out = NormalizeRewards(z_score=True)(make_steps([2, 4, 4, 4, 5, 5, 7, 9]))
    # mean 5 ; squared deviations 9+1+1+1+0+0+4+16 = 32 ; var 32/8 = 4 ; std 2
    assert [s.reward for s in out] == pytest.approx([-1.5, -0.5, -0.5, -0.5, 0, 0, 1, 2])


@pytest.mark.parametrize("cls", [NormalizeRewards, NormalizeRewardsByEnv])
@pytest.mark.parametrize("z_score", [False, True])
def test_a_constant_or_single_bucket_normalises_to_zeros(cls, z_score):
    constant = cls(z_score=z_score)(make_steps([0.1, 0.1, 0.1]))  # std 0 (UnstableBaselines v0.2 gave NaN)
    assert [s.reward for s in constant] == [0.0, 0.0, 0.0]
    assert [s.reward for s in cls(z_score=z_score)(make_steps([7.0]))] == [0.0]
    assert cls(z_score=z_score)([]) == []


def test_normalize_by_env_uses_each_envs_own_statistics_and_keeps_order():
    steps = make_steps([1, 10, 5, 10, 5], ["A", "B", "A", "B", "C"])
    # A: [1, 5] mean 3 -> [-2, 2], std 2 -> z [-1, 1] ; B: constant -> [0, 0] ; C: single -> [0]
    centred = NormalizeRewardsByEnv()(steps)
    assert [s.reward for s in centred] == pytest.approx([-2, 0, 2, 0, 0])
    assert [s.env_id for s in centred] == ["A", "B", "A", "B", "C"]
    z = NormalizeRewardsByEnv(z_score=True)(steps)
    assert [s.reward for s in z] == pytest.approx([-1, 0, 1, 0, 0])


@pytest.mark.parametrize("cls", [NormalizeRewards, NormalizeRewardsByEnv])
def test_sampling_transforms_refuse_bad_input(cls):
    with pytest.raises(ConfigError, match="z_score must be true or false"):
        cls(z_score="false")
    with pytest.raises(
        UnstableError, match="step of game 1, player 0, turn 1 \\(A\\): reward must be a finite"
    ):
        cls()(make_steps([1.0, math.nan]))


# ---------------------------------------------------------------- compose


def test_compose_final_applies_in_order_and_round_trips_state():
    chain = ComposeFinalRewardTransforms([SpiralRAE(0.5), RoleAdvantageFormatter(0.5)])
    # spiral: {1, -1} (b .5, -.5) ; role-advantage of that: b .5, -.5 -> {.5, -.5}
    assert chain(WIN, "A") == approx({0: 0.5, 1: -0.5})
    # spiral: {.5, -.5} (b .75, -.75) ; role-advantage: b0 .25 + .25 = .5 -> 0, b1 -.5 -> 0
    assert chain(WIN, "A") == approx({0: 0.0, 1: 0.0})
    state = json_round_trip(chain.state_dict())
    assert [m["type"] for m in state["transforms"]] == ["SpiralRAE", "RoleAdvantageFormatter"]
    assert state["transforms"][0]["state"] == {"baselines": {"A": {"0": 0.75, "1": -0.75}}}
    resumed = ComposeFinalRewardTransforms([SpiralRAE(0.5), RoleAdvantageFormatter(0.5)])
    resumed.load_state_dict(state)
    assert resumed(LOSS, "A") == chain(LOSS, "A")


def test_compose_load_state_refuses_a_different_chain():
    state = ComposeFinalRewardTransforms([SpiralRAE()]).state_dict()
    with pytest.raises(UnstableError, match="configure the same reward transforms"):
        ComposeFinalRewardTransforms([RoleAdvantageFormatter()]).load_state_dict(state)
    with pytest.raises(UnstableError, match="as written by state_dict"):
        ComposeFinalRewardTransforms([]).load_state_dict({"transforms": "x"})


def test_compose_step_applies_in_order():
    traj = make_trajectory()
    chain = ComposeStepRewardTransforms([RewardForFormat(0.25, -0.5), PenaltyForInvalidMove(0.1, -2.0)])
    assert chain(traj, 0, 1.0) == pytest.approx(1.35)  # 1 + .25 + .1
    assert chain(traj, 1, 1.0) == pytest.approx(-1.5)  # 1 - .5 - 2
    assert chain.state_dict() == {
        "transforms": [
            {"type": "RewardForFormat", "state": {}},
            {"type": "PenaltyForInvalidMove", "state": {}},
        ]
    }


def test_compose_sampling_applies_in_order():
    steps = make_steps([1, 10, 5, 10, 5], ["A", "B", "A", "B", "C"])
    chain = ComposeSamplingRewardTransforms([NormalizeRewardsByEnv(), NormalizeRewards(z_score=True)])
    # by env: [-2, 0, 2, 0, 0] ; then batch mean 0, var (4 + 4) / 5 = 1.6
    s = math.sqrt(1.6)
    assert [x.reward for x in chain(steps)] == pytest.approx([-2 / s, 0, 2 / s, 0, 0])


def test_empty_chains_are_the_identity():
    assert ComposeFinalRewardTransforms()(WIN, "A") == WIN
    assert ComposeStepRewardTransforms()(make_trajectory(), 0, 0.5) == 0.5
    steps = make_steps([3.0])
    assert ComposeSamplingRewardTransforms()(steps) == steps


@pytest.mark.parametrize(
    "chain, members, match",
    [
        (ComposeFinalRewardTransforms, [NormalizeRewards()], "is a sampling transform"),
        (ComposeSamplingRewardTransforms, [RewardForFormat()], "is a step transform"),
        (ComposeStepRewardTransforms, [RewardForFormat], "got the class RewardForFormat"),
        (ComposeStepRewardTransforms, [lambda t, i, r: r], "is not a reward transform"),
        (ComposeFinalRewardTransforms, SpiralRAE(), "must be a list"),
    ],
)
def test_compose_refuses_wrong_members(chain, members, match):
    with pytest.raises(ConfigError, match=match):
        chain(members)


# ---------------------------------------------------------------- plugin registration


@pytest.fixture
def only_this_plugin(monkeypatch):
    try:
        metadata.version("unstable-rewards")
    except metadata.PackageNotFoundError:
        pytest.skip("unstable-rewards is not installed: pip install -e plugins/unstable_rewards")
    monkeypatch.setenv("UNSTABLE_LOAD_PLUGINS", "unstable-rewards")
    plugins.reset()
    yield plugins.get_registry()
    plugins.reset()


def test_the_installed_plugin_registers_all_nine_transforms(only_this_plugin):
    registry = only_this_plugin
    names = [
        "entropy-bonus",
        "group-relative",
        "normalize",
        "normalize-by-env",
        "penalty-for-invalid-move",
        "reward-for-format",
        "role-advantage",
        "role-advantage-by-env",
        "spiral-rae",
    ]
    assert registry.names("reward_transform") == names
    assert all(isinstance(c.target, str) for c in registry.by_kind("reward_transform"))  # lazy until used
    (info,) = plugins.list_plugins()
    assert (info.name, info.version, info.hooks, info.error) == (
        "unstable-rewards",
        "0.1.0",
        ["register_reward_transforms"],
        None,
    )
    assert plugins.load("reward_transform", "spiral-rae") is SpiralRAE


def test_registered_transforms_have_their_stage_and_build_from_keyword_params(only_this_plugin):
    stages = {name: stage_of(only_this_plugin.load("reward_transform", name)) for name in TRANSFORMS}
    assert stages == {
        "role-advantage": "final",
        "role-advantage-by-env": "final",
        "spiral-rae": "final",
        "reward-for-format": "step",
        "penalty-for-invalid-move": "step",
        "entropy-bonus": "step",
        "normalize": "sampling",
        "normalize-by-env": "sampling",
        "group-relative": "sampling",
    }
    params = {"reward": 1, "penalty": -1}  # as read from TOML
    t = only_this_plugin.load("reward_transform", "reward-for-format")(**params)
    assert t(make_trajectory(), 1, 0.0) == -1.0
