"""A single-turn task, and the env that plays it as a one-player, one-turn game.

A task is a set of (prompt, reference answer) items and a checker. Played through `TaskEnv`, item `seed`
(modulo the task's size) is the observation; the whole completion is checked; the reward is +1 for a
correct answer and -1 otherwise, as a win and a loss of a game, so tasks train, group (`repeat=G`: G
answers to one item) and evaluate like games, with the same token ids and logprobs.
"""

from __future__ import annotations

from typing import Any

import attrs

from unstable_core.envs.answers import AnswerCheck, check_answer

CORRECT, WRONG = 1.0, -1.0
SOLO = "none"  # the opponent of a one-player game in reports: its win rate is the task's accuracy


@attrs.frozen
class TaskItem:
    """One question of a task and its reference answer (`id`: where it came from, e.g. `file.jsonl:12`)."""

    prompt: str
    answer: str
    id: str = ""


class Task:
    """A single-turn task: `item(index)` gives a question; `check` grades a completion against it.

    Subclasses give `item` and `size` (None for a generator without end); the default `check` is the math
    checker of `unstable_core.envs.answers` (last `\\boxed{}`, numbers compared by value).
    """

    size: int | None = None

    def item(self, index: int) -> TaskItem:
        raise NotImplementedError

    def check(self, completion: str, item: TaskItem) -> AnswerCheck:
        """Grade `completion` against `item`'s reference answer (an echo of its prompt is no answer)."""
        return check_answer(completion, item.answer, item.prompt)


@attrs.define
class _State:
    """What the game loop's invalid-move probe reads: a completion with no answer is an invalid move."""

    game_info: dict[int, dict[str, Any]] = attrs.field(factory=lambda: {0: {}})


class TaskEnv:
    """A TextArena-compatible env of one task: `reset` picks the item, one `step` checks the answer.

    `takes_completion` tells the game loop to pass the whole completion (not an extracted `[move]`).
    """

    takes_completion = True

    def __init__(self, task: Task) -> None:
        self.task = task
        self.item: TaskItem | None = None
        self.result: AnswerCheck | None = None
        self.state = _State()

    def reset(self, num_players: int = 1, seed: int | None = None) -> None:
        if num_players != 1:
            raise ValueError(f"a task has one player, not {num_players}; use ID:1 (or leave the count out)")
        index = 0 if seed is None else int(seed)
        if self.task.size is not None:
            index %= self.task.size
        self.item, self.result, self.state = self.task.item(index), None, _State()

    def get_observation(self) -> tuple[int, str]:
        if self.item is None:
            raise RuntimeError("reset the env before asking for an observation")
        return 0, self.item.prompt

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        if self.item is None or self.result is not None:
            raise RuntimeError("a task takes one answer after each reset")
        self.result = self.task.check(action, self.item)
        self.state.game_info[0] = {"invalid_move": self.result.answer is None, "reason": self.result.reason}
        info = {"answer": self.result.answer, "reference": self.result.reference, "item": self.item.id}
        return True, info

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, Any]]]:
        if self.result is None:
            raise RuntimeError("the task was closed before it was answered")
        return {0: CORRECT if self.result.correct else WRONG}, {0: {"reason": self.result.reason}}
