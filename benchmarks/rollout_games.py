"""The rollout benchmark's game loops without the engine: (d)'s plain TextArena loop and (d')'s `play_game`
in-process on the instant backend."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import instant_backend

from unstable_core.inference.base import SamplingParams

ENV_ID = "TicTacToe-v0-train"
TEMPERATURE = 0.7  # `unstable play`'s default


def play_plain_games(turns: int, seed: int = 0) -> int:
    """(d) baseline: whole TextArena TicTacToe games in a plain loop until at least `turns` turns, each
    move a random legal one read from the observation (the instant backend's choice); the turns played."""
    import textarena

    rng = random.Random(seed)
    played = game = 0
    while played < turns:
        env = textarena.make(ENV_ID)
        env.reset(num_players=2, seed=seed + game)
        done = False
        while not done:
            _, observation = env.get_observation()
            done, _ = env.step(instant_backend.choose_move(observation, rng) or "[0]")
            played += 1
        env.close()
        game += 1
    return played


def plain_turns_per_s(turns: int, seed: int = 0) -> float:
    """Turns per second of `play_plain_games`."""
    started = time.perf_counter()
    played = play_plain_games(turns, seed)
    return played / (time.perf_counter() - started)


def play_inprocess_games(
    model: str, games_in_flight: int, turns: int, max_tokens: int, backend: Any = None
) -> int:
    """(d') the game loop alone: `play_game` coroutines in this process on an InstantBackend (`backend`,
    else a new one), no Ray, `games_in_flight` at a time until at least `turns` turns were played; the
    turns played."""
    from unstable_core.errors import UnstableError
    from unstable_core.games.loop import play_game
    from unstable_core.types import GameSpec, PlayerSpec

    own = backend is None
    backend = backend or instant_backend.InstantBackend(model)
    params = SamplingParams(temperature=TEMPERATURE, max_tokens=max_tokens)
    played = started_games = 0

    async def keep_playing() -> None:
        nonlocal played, started_games
        while played < turns:
            idx, started_games = started_games, started_games + 1
            seats = [PlayerSpec(pid, "ckpt-0", True, "default") for pid in (0, 1)]
            spec = GameSpec(game_idx=idx, env_id=ENV_ID, seed=idx, players=seats)
            result = await play_game(
                spec,
                backend.generate,
                backend.tokenizer,
                lora_paths={0: None, 1: None},
                policy_versions={0: 0, 1: 0},
                params=params,
            )
            if result.info.failed:
                raise UnstableError(f"in-process game {idx} failed: {result.info.error}")
            played += result.info.num_turns

    async def play_all() -> None:
        try:
            await asyncio.gather(*(keep_playing() for _ in range(games_in_flight)))
        finally:
            if own:
                await backend.close()

    asyncio.run(play_all())
    return played


def inprocess_turns_per_s(
    model: str, games_in_flight: int, turns: int, max_tokens: int, rounds: int = 1
) -> list[float]:
    """Turns per second of `play_inprocess_games`, `rounds` times on one backend loaded beforehand (its
    tokenizer's loading is no turn's cost), after a warm-up of as many turns."""
    backend = instant_backend.InstantBackend(model)
    rates = []
    try:
        play_inprocess_games(model, games_in_flight, turns, max_tokens, backend)
        for _ in range(rounds):
            started = time.perf_counter()
            played = play_inprocess_games(model, games_in_flight, turns, max_tokens, backend)
            rates.append(played / (time.perf_counter() - started))
    finally:
        asyncio.run(backend.close())
    return rates
