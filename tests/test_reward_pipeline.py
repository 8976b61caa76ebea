"""RewardPipeline on its own: stages in order, non-finite rewards refused by name, statistics round trip."""

import json
import re

import pytest
from unstable_rewards import NormalizeRewards, RewardForFormat, RoleAdvantageFormatter

from unstable_core.errors import UnstableError
from unstable_core.rewards import FinalRewardTransform, SamplingRewardTransform, StepRewardTransform
from unstable_core.rewards.pipeline import RewardPipeline
from unstable_core.types import GameInformation, GameResult, Step, Trajectory


def game(idx: int, rewards: dict[int, float]) -> GameResult:
    """Every seat collected, two steps each: the first well formatted, the second not."""
    trajs = [
        Trajectory(
            pid=pid,
            env_id="E",
            model_uid="m",
            steps=[
                Step(pid=pid, env_id="E", obs="o", act="a", turn=2 * t + pid, game_idx=idx, format_ok=t == 0)
                for t in range(2)
            ],
            collect_data=True,
        )
        for pid in rewards
    ]
    info = GameInformation(game_idx=idx, env_id="E", final_rewards=dict(rewards), learner_pids=list(rewards))
    return GameResult(info=info, trajectories=trajs)


def test_final_then_step_then_sampling():
    pipeline = RewardPipeline(
        [RoleAdvantageFormatter(ema_alpha=0.5)], [RewardForFormat(reward=1.0)], [NormalizeRewards()]
    )
    steps = [s for t in pipeline.shape_game(game(0, {0: 1.0, 1: -1.0})) for s in t.steps]
    # final: r - (0.5 * 0 + 0.5 * r) = r / 2; step: +1 when formatted
    assert [(s.final_reward, s.shaping, s.reward) for s in steps] == [
        (0.5, 1.0, 1.5),
        (0.5, 0.0, 0.5),
        (-0.5, 1.0, 0.5),
        (-0.5, 0.0, -0.5),
    ]
    # sampling: centred over the batch (mean 0.5); outcome and shaping stay as they were
    batch = pipeline.shape_batch(steps)
    assert [(s.final_reward, s.shaping, s.reward) for s in batch] == [
        (0.5, 1.0, 1.0),
        (0.5, 0.0, 0.0),
        (-0.5, 1.0, 0.0),
        (-0.5, 0.0, -1.0),
    ]


class NaNFinal(FinalRewardTransform):
    def __call__(self, rewards, env_id=None):
        return {pid: float("nan") for pid in rewards}


class InfStep(StepRewardTransform):
    def __call__(self, trajectory, step_index, reward):
        return float("inf")


class NaNSampling(SamplingRewardTransform):
    def __call__(self, steps):
        for s in steps:
            s.reward = float("nan")
        return steps


@pytest.mark.parametrize(
    "pipeline, message",
    [
        (
            RewardPipeline(final=[NaNFinal()]),
            "final reward transform NaNFinal returned nan for seat 0 of a game of E",
        ),
        (RewardPipeline(step=[InfStep()]), "step reward transform InfStep returned inf for step 0"),
        (
            RewardPipeline(sampling=[NaNSampling()]),
            "sampling reward transform NaNSampling returned nan for a step of the batch",
        ),
    ],
)
def test_a_non_finite_reward_stops_with_one_line_naming_the_transform(pipeline, message):
    with pytest.raises(UnstableError) as err:
        pipeline.shape_batch([s for t in pipeline.shape_game(game(0, {0: 1.0})) for s in t.steps])
    assert str(err.value) == (
        f"{message}: reward transforms must return finite numbers; fix the transform or drop it"
    )


def test_a_transform_that_raises_is_named():
    class Broken(StepRewardTransform):
        def __call__(self, trajectory, step_index, reward):
            raise KeyError("no such seat")

    with pytest.raises(
        UnstableError, match=re.escape("step reward transform Broken raised KeyError: 'no such seat'")
    ):
        RewardPipeline(step=[Broken()]).shape_game(game(0, {0: 1.0}))


def test_state_dict_round_trips_the_baselines_through_json():
    trained = RewardPipeline([RoleAdvantageFormatter(ema_alpha=0.5)], [RewardForFormat()])
    trained.shape_game(game(0, {0: 1.0, 1: -1.0}))
    state = json.loads(json.dumps(trained.state_dict()))
    assert state == {"final": [{"baselines": {"*": {"0": 0.5, "1": -0.5}}}], "step": [{}], "sampling": []}

    resumed = RewardPipeline([RoleAdvantageFormatter(ema_alpha=0.5)], [RewardForFormat()])
    resumed.load_state_dict(state)
    assert resumed.state_dict() == trained.state_dict()
    after = [t.final_reward for t in resumed.shape_game(game(1, {0: 1.0, 1: -1.0}))]
    assert after == [t.final_reward for t in trained.shape_game(game(1, {0: 1.0, 1: -1.0}))] == [0.25, -0.25]
