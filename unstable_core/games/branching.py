"""Values of the answers not played, from play: branch a finished game at each state a learner seat visited.

For each such step with legal answers (`games.legal_answers`), and each legal move m there, the game is
replayed from its seed through the actions played before that turn, m is played, and the game continues
`samples` times with the same players: the learner seat with the policy that played it, the opponent as it
was (model, checkpoint or scripted player). The mover's final reward, averaged over the continuations, is
m's value: `step_info["legal"]["values"]`. Each continuation samples with its own seed, drawn from the
run's seed, the game's, the turn, the move and the sample's index, so the same seeds give the same values.

Hidden information: the env's hidden state is the real one (in Kuhn Poker, the opponent's real card). The
real deal is a draw from the distribution of deals given everything the mover saw, under the policies that
played, so a value is an unbiased sample of the move's value at the mover's information set, and its mean
over the visits of that set converges to it. Resampling the hidden cards uniformly would be biased: it
ignores how the opponent's play so far depends on its card (a bet makes a king likelier). The test
`tests/test_branching.py` checks the unbiasedness against an exact enumeration of Kuhn Poker's deals.

No solver's policy or value enters: the continuations are played by the game's own players.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
from typing import Any

import attrs

from unstable_core.games.env_ops import action_receiver
from unstable_core.types import LEGAL


def continuation_seed(seed: int | None, game_seed: int, turn: int, move: int, sample: int) -> int | None:
    """The sampling seed of one continuation (None: the run samples without seeds)."""
    if seed is None:
        return None
    return random.Random(f"branch:{seed}:{game_seed}:{turn}:{move}:{sample}").randrange(2**31)


def _fresh(player: Any, seed: int | None) -> Any:
    """A seat's mover for one continuation: a scripted player copied, its random draws reseeded from the
    continuation's seed (continuations run at once: one shared generator would make their draws depend on
    the order in which inference answers); a model's `generate` as it is."""
    from unstable_core.games.players.base import ScriptedPlayer

    if not isinstance(player, ScriptedPlayer):
        return player
    player = copy.deepcopy(player)
    rng = getattr(player, "rng", None)
    if isinstance(rng, random.Random):
        rng.seed(seed)
    return player


async def continue_from(game: Any, index: int, move: str, move_index: int, sample: int, max_turns: int):
    """(the mover's final reward after playing `move` at `game.steps[index]`'s state then playing on, the
    turns generated): one continuation."""
    step = game.steps[index]
    env = game.start_env()
    receive = action_receiver(env)
    for prior in game.steps[:index]:  # `action` is what the env received, the same again
        env.step(prior.action)
    done, _ = env.step(receive(move))
    if done:
        rewards, _ = env.close()
        return float(rewards[step.pid]), 0
    params = attrs.evolve(
        game.params, seed=continuation_seed(game.params.seed, game.spec.seed, step.turn, move_index, sample)
    )
    players = {pid: _fresh(g, params.seed) for pid, g in game.generate.items()}
    branch = attrs.evolve(
        game, steps=[], final_rewards={}, reason="", params=params, record_legal=False, generate=players
    )
    await branch.play(max_turns, env=env, first_turn=step.turn + 1)
    return float(branch.final_rewards[step.pid]), len(branch.steps)


async def add_branch_values(game: Any, samples: int, max_turns: int, max_moves: int = 0) -> None:
    """Put each legal move's value (mean over `samples` continuations) and the branching's cost on every
    learner step of the finished `game` that has legal answers (at most `max_moves` of them, if > 0: the
    states of many moves cost the most continuations, and in TicTacToe they hold no win or block)."""
    for index, step in enumerate(game.steps):
        legal = step.step_info.get(LEGAL)
        if not legal or not game.players[step.pid].collect_data:
            continue
        if max_moves and len(legal["moves"]) > max_moves:
            continue
        started = time.monotonic()
        jobs = [
            continue_from(game, index, move, m, k, max_turns)
            for m, move in enumerate(legal["moves"])
            for k in range(samples)
        ]
        found: list[Any] = await asyncio.gather(*jobs)
        values = [
            sum(v for v, _ in found[m * samples : (m + 1) * samples]) / samples
            for m in range(len(legal["moves"]))
        ]
        legal.update(
            values=values,
            k=samples,
            cost={"turns": sum(t for _, t in found), "seconds": time.monotonic() - started},
        )
