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

A horizon (`depth`: at most that many turns after the move) bounds a continuation's cost: one cut there,
unfinished, is worth 0, a draw's value (a truncated return with no bootstrap, biased where the game would
be won or lost later). A discount `gamma` weighs the outcome by gamma^t, t the turns played after the move
(retries of an invalid answer included), so that a move that wins now is worth more than one that wins
later, and a loss later costs less than one at once.

No solver's policy or value enters: the continuations are played by the game's own players.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.games.env_ops import action_receiver
from unstable_core.games.players.base import SCRIPTED
from unstable_core.types import LEGAL


@attrs.frozen
class Branching:
    """How a finished game is branched: `samples` continuations a move (0: no branching), at the states
    of at most `max_moves` legal moves (0: every state), each at most `depth` turns long (0: to the end),
    the outcome discounted by `discount` a turn. A bad value raises UnstableError naming it."""

    samples: int = 0
    max_moves: int = 0
    depth: int = 0
    discount: float = 1.0

    def __attrs_post_init__(self) -> None:
        for name, value, zero in (
            ("branch_samples", self.samples, "branches nothing"),
            ("branch_max_moves", self.max_moves, "branches every state"),
            ("branch_depth", self.depth, "plays each continuation to the end"),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UnstableError(f"{name} must be an int >= 0, got {value!r}; 0 {zero}")
        discount = self.discount
        if isinstance(discount, bool) or not isinstance(discount, (int, float)) or not 0 < discount <= 1:
            raise UnstableError(
                f"branch_discount must be a number in (0, 1], got {discount!r}; 1 discounts nothing"
            )

    def value(self, reward: float | None, turns: int) -> float:
        """A continuation's value for the mover: its reward discounted over the `turns` played after the
        move, or 0 for one cut at the horizon (`reward` None)."""
        return 0.0 if reward is None else reward * self.discount**turns


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


async def continue_from(
    game: Any, index: int, move: str, move_index: int, sample: int, max_turns: int, branching: Branching
) -> tuple[float, int, int]:
    """(the value for the mover of playing `move` at `game.steps[index]`'s state then playing on, the turns
    played, those of them a model generated): one continuation, cut after `branching.depth` turns if that
    is > 0."""
    step = game.steps[index]
    env = game.start_env()
    receive = action_receiver(env)
    for prior in game.steps[:index]:  # `action` is what the env received, the same again
        env.step(prior.action)
    done, _ = env.step(receive(move))
    if done:
        rewards, _ = env.close()
        return branching.value(float(rewards[step.pid]), 0), 0, 0
    params = attrs.evolve(
        game.params, seed=continuation_seed(game.params.seed, game.spec.seed, step.turn, move_index, sample)
    )
    players = {pid: _fresh(g, params.seed) for pid, g in game.generate.items()}
    branch = attrs.evolve(
        game, steps=[], final_rewards={}, reason="", params=params, record_legal=False, generate=players
    )
    await branch.play(max_turns, env=env, first_turn=step.turn + 1, horizon=branching.depth or None)
    reward = float(branch.final_rewards[step.pid]) if branch.final_rewards else None
    generated = sum(s.step_info.get("finish_reason") != SCRIPTED for s in branch.steps)
    return branching.value(reward, len(branch.steps)), len(branch.steps), generated


async def add_branch_values(game: Any, branching: Branching, max_turns: int) -> None:
    """Put each legal move's value (mean over `branching.samples` continuations) and the branching's cost on
    every learner step of the finished `game` that has legal answers (at most `branching.max_moves` of them,
    if > 0: the states of many moves cost the most continuations, and in TicTacToe they hold no win or
    block)."""
    samples, max_moves = branching.samples, branching.max_moves
    for index, step in enumerate(game.steps):
        legal = step.step_info.get(LEGAL)
        if not legal or not game.players[step.pid].collect_data:
            continue
        if max_moves and len(legal["moves"]) > max_moves:
            continue
        started = time.monotonic()
        jobs = [
            continue_from(game, index, move, m, k, max_turns, branching)
            for m, move in enumerate(legal["moves"])
            for k in range(samples)
        ]
        found: list[Any] = await asyncio.gather(*jobs)
        values = [
            sum(v for v, _, _ in found[m * samples : (m + 1) * samples]) / samples
            for m in range(len(legal["moves"]))
        ]
        turns, generated = sum(t for _, t, _ in found), sum(g for _, _, g in found)
        cost = {"turns": turns, "generated": generated, "seconds": time.monotonic() - started}
        legal.update(values=values, k=samples, cost=cost)
