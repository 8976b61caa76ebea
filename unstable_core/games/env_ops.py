"""Environments as the game loop sees them: making one, the action it really received, and a
per-step invalid-move signal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EnvFactory = Callable[[str], Any]


def make_env(env_id: str) -> Any:
    """The env of one game: a task, a plugin's game, or a TextArena env wrapped as registered (`-train` ids
    format actions and observations); see `unstable_core.envs.catalogue`."""
    from unstable_core.envs.catalogue import make_env as make

    return make(env_id)


def set_error_allowance(env: Any, allowance: int | None) -> None:
    """Set how many invalid moves a player may retry before losing, on the state `reset` just made.

    TextArena builds its state in `reset` with the env's own allowance (1 for most two-player games); the
    reference set 0, so an invalid move ends the game and the offender loses. None keeps the env's own.
    """
    state = getattr(env, "state", None)
    if allowance is None or state is None or not hasattr(state, "error_allowance"):
        return
    state.error_allowance = allowance


def received_action(env: Any, action: str) -> str:
    """The action as the innermost env receives it, after every ActionWrapper of `env` (outermost first).

    TextArena's ActionFormattingWrapper, for one, brackets an action without square brackets.
    """
    return action_receiver(env)(action)


def action_receiver(env: Any) -> Callable[[str], str]:
    """`received_action` for `env`, with its ActionWrappers found once: a game's wrappers stay the same
    from turn to turn, and walking them costs more than applying them."""
    from textarena.core import ActionWrapper, Wrapper

    formatters = []
    layer = env
    while isinstance(layer, Wrapper):
        if isinstance(layer, ActionWrapper):
            formatters.append(layer.action)
        layer = layer.env

    def receive(action: str) -> str:
        for formatter in formatters:
            action = formatter(action)
        return action

    return receive


class InvalidMoveProbe:
    """Counts the invalid moves a TextArena env reports, so each step can be flagged on its own.

    Every TextArena 0.7.4 state reports an invalid move through `State.set_invalid_move`, but what that
    leaves behind differs (an error-allowance retry by the same player, a per-player `invalid_move` flag
    when the allowance is spent, an elimination in free-for-all games) and is partly reset by the next
    `state.step()`. Counting the calls is the one signal that is exact for every state class. Envs without
    such a state (custom test envs) fall back to the per-player `game_info["invalid_move"]` flag.
    """

    def __init__(self, env: Any) -> None:
        self.calls = 0
        self._state = getattr(env, "state", None)
        report = getattr(self._state, "set_invalid_move", None)
        if report is None:
            return

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return report(*args, **kwargs)

        self._state.set_invalid_move = counted

    def _flagged(self, pid: int) -> bool:
        game_info = getattr(self._state, "game_info", None)
        return bool(isinstance(game_info, dict) and game_info.get(pid, {}).get("invalid_move", False))

    def step(self, env: Any, pid: int, action: str) -> tuple[bool, dict[str, Any], bool]:
        """`env.step(action)` for seat `pid`: (done, step info, whether this move was invalid)."""
        calls_before, flagged_before = self.calls, self._flagged(pid)
        done, info = env.step(action)
        invalid = self.calls > calls_before or (self._flagged(pid) and not flagged_before)
        return bool(done), dict(info or {}), invalid
