"""Kuhn Poker's exact yardstick: the exploitability of a policy's first round, computed by OpenSpiel.

The first round of every TextArena KuhnPoker variant is one hand of Kuhn Poker, whose 12 information sets
OpenSpiel names by the card (0 = J, 1 = Q, 2 = K) and the bets so far (`p` pass, `b` bet): the first
player's `0`, `0pb`, ... and the second's `0p`, `0b`, .... TextArena opens round 1 with its seat 1 (the
starting seat alternates from 0), so OpenSpiel's player 0 is TextArena's seat 1. Each information set is
reached in a real env of the asked id: reset with a seed whose deal (TextArena deals with the global
`random.shuffle`, seeded by `reset`) gives the mover the set's card, then the moves of the history; the
observation does not depend on the opponent's card, which the mover cannot see. OpenSpiel's pass is
`[check]` or `[fold]`, its bet `[bet]` or `[call]`. The policy's probabilities of the two legal answers
are renormalised (a set where it gives them no mass at all plays both at 1/2), and the tabular policy's
exploitability (`open_spiel.python.algorithms.exploitability`: the mean over the two players of what a
best response gains against it, in chips per hand) is 0 for a Nash equilibrium and 0.458 for uniform play.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.games.analysis.probe import Figure, Policy, Position, ProbeResult, legal_mass
from unstable_core.games.env_ops import action_receiver, make_env

NAME = "kuhn-exploitability"
DEFAULT_ENV = "KuhnPoker-v0-short-train"
INSTALL = "pip install open-spiel"
CARDS = "JQK"
OPENING_SEAT = 1  # TextArena's seat that acts first in round 1: OpenSpiel's player 0
# OpenSpiel's history -> the legal TextArena moves there, as (pass, bet)
MOVES = {
    "": ("[check]", "[bet]"),
    "p": ("[check]", "[bet]"),
    "b": ("[fold]", "[call]"),
    "pb": ("[fold]", "[call]"),
}
HISTORY_MOVES = {"p": "[check]", "b": "[bet]"}  # the moves that lead to a set (no fold or call in them)


def require_open_spiel() -> Any:
    """pyspiel, or a ConfigError saying how to install OpenSpiel."""
    try:
        import pyspiel
    except ImportError:
        raise ConfigError(f"probe {NAME!r} needs OpenSpiel, which is not installed: {INSTALL}") from None
    return pyspiel


def spellings(move: str) -> tuple[str, ...]:
    """The spellings of a move the probe counts (the env reads `[check]` in any case): lower case,
    capitalised and upper case."""
    word = move[1:-1]
    return tuple(dict.fromkeys(f"[{w}]" for w in (word, word.capitalize(), word.upper())))


def information_sets() -> list[tuple[str, int, int, str]]:
    """(OpenSpiel key, OpenSpiel player, card, history) of the 12 information sets, in OpenSpiel's order
    of players, then cards, then histories."""
    sets = []
    for player, histories in ((0, ("", "pb")), (1, ("p", "b"))):
        for card in range(3):
            for history in histories:
                sets.append((f"{card}{history}", player, card, history))
    return sets


@contextmanager
def _kept_random_state() -> Iterator[None]:
    """The global `random` state as it was, after the env's seeded resets."""
    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)


def deal_seed(env_id: str, seat: int, card: int, other: int, tries: int = 1000) -> int:
    """The first seed whose round-1 deal gives `seat` the `card` and the other seat `other`."""
    with _kept_random_state():
        for seed in range(tries):
            env = make_env(env_id)
            env.reset(num_players=2, seed=seed)
            cards = env.state.game_state["player_cards"]
            if (cards[seat], cards[1 - seat]) == (card, other):
                return seed
    raise UnstableError(f"{env_id}: no seed below {tries} deals {CARDS[card]} to seat {seat}")


def reach(env_id: str, card: int, player: int, history: str, other: int | None = None) -> Position:
    """The real env of `env_id` at OpenSpiel's information set (`player`, `card`, `history`), the opponent
    holding `other` (default: the lowest other card)."""
    seat = OPENING_SEAT if player == 0 else 1 - OPENING_SEAT
    other = min(c for c in range(3) if c != card) if other is None else other
    seed = deal_seed(env_id, seat, card, other)
    with _kept_random_state():
        env = make_env(env_id)
        env.reset(num_players=2, seed=seed)
    if env.state.current_player_id != OPENING_SEAT:
        raise UnstableError(
            f"{env_id}: TextArena opened round 1 with seat {env.state.current_player_id}, not "
            f"{OPENING_SEAT}; the probe's seat mapping no longer holds for this TextArena version"
        )
    receive = action_receiver(env)
    for step in history:
        env.step(receive(HISTORY_MOVES[step]))
    pid, observation = env.get_observation()
    if pid != seat or env.state.game_state["current_round"] != 1:
        raise UnstableError(f"{env_id}: after {history!r} seat {pid} is to move, not {seat}, in round 1")
    answers = {move: spellings(move) for move in MOVES[history]}
    return Position(f"{card}{history}", env_id, env, pid, observation, answers)


def positions(env_id: str) -> list[Position]:
    """The 12 first-round information sets of `env_id`, in `information_sets` order."""
    return [reach(env_id, card, player, history) for _, player, card, history in information_sets()]


class KuhnExploitability:
    """Probe `kuhn-exploitability`: the exact exploitability of a policy's first-round play."""

    default_env = DEFAULT_ENV

    def check(self, env_id: str) -> None:
        """OpenSpiel must be installed (checked before anything starts)."""
        require_open_spiel()

    def __call__(self, policy: Policy, env_id: str) -> ProbeResult:
        pyspiel = require_open_spiel()
        from open_spiel.python import policy as os_policy
        from open_spiel.python.algorithms.exploitability import exploitability

        game = pyspiel.load_game("kuhn_poker")
        sets = positions(env_id)
        found = policy(sets)
        table = os_policy.TabularPolicy(game)
        details = []
        for position, probs in zip(sets, found, strict=True):
            pass_move, bet_move = MOVES[position.key[1:]]
            mass = legal_mass(probs)
            bet = probs[bet_move] / mass if mass > 0 else 0.5
            table.action_probability_array[table.state_lookup[position.key]] = [1.0 - bet, bet]
            details.append(
                {
                    "key": position.key,
                    "card": CARDS[int(position.key[0])],
                    "seat": position.pid,
                    "probabilities": dict(probs),
                    "legal_mass": mass,
                    "bet": bet,
                }
            )
        value = float(exploitability(game, table))
        uniform = float(exploitability(game, os_policy.UniformRandomPolicy(game)))
        illegal = sum(1.0 - d["legal_mass"] for d in details) / len(details)
        return ProbeResult(
            NAME,
            env_id,
            {
                "exploitability": Figure.of_exact(value, len(sets)),
                "illegal_mass": Figure.of_exact(illegal, len(sets)),
            },
            {"exploitability": {"uniform": uniform, "nash": 0.0}, "illegal_mass": {"uniform": 0.0}},
            details,
        )
