"""Per-episode rewards and generalised advantage estimation, as pure functions."""

from __future__ import annotations

from collections.abc import Sequence

from unstable_core.errors import UnstableError
from unstable_core.types import Step


def compute_gae(
    rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float
) -> tuple[list[float], list[float]]:
    """(advantages, returns) of one episode; V_T = 0 after its last step.

    delta_t = r_t + gamma V_{t+1} - V_t;  A_t = delta_t + gamma lam A_{t+1};  R_t = A_t + V_t.
    """
    if len(rewards) != len(values):
        raise UnstableError(
            f"compute_gae: {len(rewards)} rewards but {len(values)} values; pass one value per step"
        )
    advantages = [0.0] * len(rewards)
    next_value, next_advantage = 0.0, 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        next_advantage = delta + gamma * lam * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    returns = [a + v for a, v in zip(advantages, values, strict=True)]
    return advantages, returns


def outcome_rewards(episode: Sequence[Step]) -> list[float]:
    """r_t = [t = last] * outcome: the game's (final-transformed) outcome, once, at the episode's end.

    Returns computed from these are the outcome's value whatever the game's length: a win always returns
    more than a loss. Shaping is not a reward here (see `shaped_advantages`): summed into the returns,
    +1 per valid move paid a 5-move loss (5 - 1 = 4) more than a 1-move win (1 + 1 = 2), and the learner
    was paid to prolong games. Read from `Step.final_reward`, never from `Step.reward`, which the sampling
    transforms have normalised over the batch.
    """
    last = len(episode) - 1
    return [s.final_reward if t == last else 0.0 for t, s in enumerate(episode)]


def shaped_advantages(advantages: Sequence[float], episode: Sequence[Step]) -> list[float]:
    """A_t + shaping_t: each step's own shaping (format bonus, invalid-move penalty; `Step.shaping`) is
    credited to that step alone, never accumulated into the returns of the steps before it."""
    return [a + s.shaping for a, s in zip(advantages, episode, strict=True)]


def group_episodes(steps: Sequence[Step]) -> list[list[Step]]:
    """Steps grouped by (game_idx, pid), each group ordered by turn (in order of first appearance)."""
    episodes: dict[tuple[int, int], list[Step]] = {}
    for step in steps:
        if step.game_idx < 0:
            raise UnstableError(
                f"A2C needs whole episodes but a step (player {step.pid}, turn {step.turn}) has no game_idx; "
                "feed it from an episode buffer"
            )
        episodes.setdefault((step.game_idx, step.pid), []).append(step)
    ordered = []
    for (game, pid), episode in episodes.items():
        episode.sort(key=lambda s: s.turn)
        turns = [s.turn for s in episode]
        if len(set(turns)) != len(turns):
            raise UnstableError(
                f"A2C got two steps with the same turn in game {game}, player {pid}; each turn must appear once"
            )
        ordered.append(episode)
    return ordered
