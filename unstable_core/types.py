"""The data model shared by every part of unstable: specs of games, steps, trajectories, results, models.

All classes are attrs classes made of plain values (str, int, float, list, dict), so they cross Ray
process boundaries cheaply and round-trip through JSON with `to_dict` / `from_dict`.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

ModelKind = Literal["checkpoint", "fixed"]
LEGAL = "legal"  # Step.step_info's key of a state's legal answers (games.legal_answers writes, learners.legal reads)


def to_dict(obj: Any) -> dict[str, Any]:
    """A JSON-ready dict of an attrs instance (nested attrs instances included)."""
    return attrs.asdict(obj, recurse=True)


@attrs.define
class TrainEnvSpec:
    """An environment to train on. `num_actors` seats are played by the learner's current checkpoint
    (and collect data); the remaining `num_players - num_actors` seats get sampled opponents.
    `num_actors == num_players` is mirror self-play."""

    env_id: str
    num_players: int = 2
    num_actors: int = 2
    prompt_template: str = "default"

    def __attrs_post_init__(self) -> None:
        if self.num_players < 1:
            raise ValueError(f"TrainEnvSpec {self.env_id}: num_players must be >= 1, got {self.num_players}")
        if not 1 <= self.num_actors <= self.num_players:
            raise ValueError(
                f"TrainEnvSpec {self.env_id}: num_actors must be between 1 and num_players "
                f"({self.num_players}), got {self.num_actors}"
            )


@attrs.define
class EvalEnvSpec:
    """An environment to evaluate on: the current checkpoint against `fixed_opponent` (or a sampled one)."""

    env_id: str
    num_players: int = 2
    prompt_template: str = "default"
    fixed_opponent: str | None = None


@attrs.define
class PlayerSpec:
    """Who sits at seat `pid`: a model uid of the league, and whether its turns become training data."""

    pid: int
    model_uid: str
    collect_data: bool = False
    prompt_template: str = "default"


@attrs.define
class GameSpec:
    """One game to play: environment, seed and the players at each seat.

    A game of a group (GRPO's G games from one start: the env sampler's `repeat`) has the group's id and
    size; the G games share their env, seed, seats, opponents and policy version.
    """

    game_idx: int
    env_id: str
    seed: int
    players: list[PlayerSpec] = attrs.field(factory=list)
    eval: bool = False
    group_id: str = ""
    group_size: int = 1

    @property
    def num_players(self) -> int:
        return len(self.players)


@attrs.define
class Step:
    """One turn of one player, with the exact tokens the model saw and produced.

    `prompt_ids` + `completion_ids` is what the learner trains on; `logprobs` are the sampling-time
    log-probabilities of `completion_ids` under the tempered policy that sampled them. `final_reward` is
    the seat's game outcome after the final reward transforms; `shaping` is what the step transforms added
    to it for this turn (format bonus, invalid-move penalty); `reward` is final_reward + shaping, then
    changed by the sampling transforms (batch normalisation). An episode learner (GAE) reads
    `final_reward` and `shaping`, which the sampling transforms never touch.
    """

    pid: int
    env_id: str
    obs: str
    act: str
    action: str = ""
    prompt_ids: list[int] = attrs.field(factory=list)
    completion_ids: list[int] = attrs.field(factory=list)
    logprobs: list[float] = attrs.field(factory=list)
    reward: float = 0.0
    final_reward: float = 0.0
    shaping: float = 0.0
    format_ok: bool = True
    invalid_move: bool = False
    model_uid: str = ""
    policy_version: int = 0
    game_idx: int = -1
    turn: int = 0
    step_info: dict[str, Any] = attrs.field(factory=dict)
    group_id: str = ""  # the game's group (GameSpec.group_id), "" outside groups


@attrs.define
class Trajectory:
    """All steps one seat played in one game, and that seat's final reward."""

    pid: int
    env_id: str
    model_uid: str
    steps: list[Step] = attrs.field(factory=list)
    final_reward: float = 0.0
    collect_data: bool = False

    @property
    def num_turns(self) -> int:
        return len(self.steps)

    @property
    def format_rate(self) -> float:
        return sum(s.format_ok for s in self.steps) / len(self.steps) if self.steps else 0.0


@attrs.define
class GameInformation:
    """What happened in one game: who played, final rewards, length, and failure if any."""

    game_idx: int
    env_id: str
    seed: int = 0
    eval: bool = False
    models: dict[int, str] = attrs.field(factory=dict)
    learner_pids: list[int] = attrs.field(factory=list)
    final_rewards: dict[int, float] = attrs.field(factory=dict)
    num_turns: int = 0
    invalid_move: dict[int, bool] = attrs.field(factory=dict)
    format_rate: dict[int, float] = attrs.field(factory=dict)
    reason: str = ""
    failed: bool = False
    error: str | None = None
    duration_s: float = 0.0
    group_id: str = ""
    group_size: int = 1


@attrs.define
class GameResult:
    """A finished (or failed) game: its information and every seat's trajectory."""

    info: GameInformation
    trajectories: list[Trajectory] = attrs.field(factory=list)

    @property
    def training_trajectories(self) -> list[Trajectory]:
        return [t for t in self.trajectories if t.collect_data]


@attrs.define
class ModelMeta:
    """A model of the league: a learner checkpoint or a fixed opponent, with its TrueSkill rating."""

    uid: str
    kind: ModelKind
    path_or_name: str | None = None
    iteration: int = 0
    mu: float = 25.0
    sigma: float = 25.0 / 3
    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    active: bool = True

    @property
    def conservative(self) -> float:
        """mu - 3 sigma: the usual leaderboard score."""
        return self.mu - 3 * self.sigma


def game_result_from_dict(data: dict[str, Any]) -> GameResult:
    """Rebuild a GameResult from `to_dict` output (as written to games/*.jsonl)."""
    info = dict(data["info"])
    for key in ("models", "final_rewards", "invalid_move", "format_rate"):
        info[key] = {int(k): v for k, v in info.get(key, {}).items()}
    trajs = []
    for t in data.get("trajectories", []):
        t = dict(t)
        t["steps"] = [Step(**s) for s in t.get("steps", [])]
        trajs.append(Trajectory(**t))
    return GameResult(info=GameInformation(**info), trajectories=trajs)


@attrs.frozen
class Triple:
    """What one group of games measures: `model` against `opponent` on `env`."""

    model: str
    opponent: str
    env: str


@attrs.frozen
class PlannedGame:
    """One game of the evaluation: its spec and where the evaluated model sits."""

    triple: Triple
    spec: GameSpec
    model_seat: int
