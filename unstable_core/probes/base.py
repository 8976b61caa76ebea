"""What a probe is and works with: the `Probe` protocol, the positions it asks a policy about (reached in a
real env: `position_after`), and the policies it asks (a model's, a scripted player's, a fixed one)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from unstable_core.errors import UnstableError
from unstable_core.games.env_ops import action_receiver, make_env

if TYPE_CHECKING:
    from unstable_core.probes.figures import ProbeResult


@attrs.frozen
class Position:
    """One decision a probe asks about: the real env driven there, the mover's seat and observation, and
    its legal moves, each with the spellings of it the game accepts (`"[check]": ("[check]", "[Check]")`,
    each a whole move as TextArena writes it, ending with `]`). A policy gives each legal move (each key of
    `answers`) a probability: the sum over its spellings. `key` names the position in the probe's report
    (Kuhn Poker: OpenSpiel's information state)."""

    key: str
    env_id: str
    env: Any
    pid: int
    observation: str
    answers: Mapping[str, tuple[str, ...]]

    def move_of(self, answer: str) -> str | None:
        """The legal move (a key of `answers`) that `answer` spells, read as the game reads it (surrounding
        space and case do not matter); None when it spells none (an answer the game would refuse)."""
        wanted = answer.strip().lower()
        for move, spellings in self.answers.items():
            if wanted in (s.strip().lower() for s in (move, *spellings)):
                return move
        return None


#: for each position, the probability of each legal move (its spellings summed); the rest up to 1 is the
#: mass on answers the game would refuse
Policy = Callable[[Sequence[Position]], list[dict[str, float]]]


@runtime_checkable
class Probe(Protocol):
    """An exact yardstick of a policy at fixed positions of a game, registered through `register_probes`.

    The registered class is built with no arguments, once, when a run or an evaluation is planned:
    `check(env_id)` then raises a ConfigError for what the probe lacks there (a package to install), before
    anything starts; `default_env` is the env it measures when none is given (`--probe NAME`, not
    `NAME:ENV`). `probe(policy, env_id)` drives real envs of `env_id` to its positions
    (`position_after`), asks `policy` about them and returns its figures."""

    default_env: str | None

    def check(self, env_id: str) -> None: ...

    def __call__(self, policy: Policy, env_id: str) -> ProbeResult: ...


def position_after(
    key: str,
    env_id: str,
    answers: Mapping[str, Sequence[str]],
    moves: Sequence[str] = (),
    seed: int = 0,
    players: int = 2,
) -> Position:
    """The position of a real env of `env_id` (a TextArena id, or a game a plugin registered) reset with
    `seed` for `players` players, after `moves` are played in turn (each written as the game reads it),
    asking about `answers` (legal move -> its spellings)."""
    env = make_env(env_id)
    env.reset(num_players=players, seed=seed)
    receive = action_receiver(env)
    for move in moves:
        done, _ = env.step(receive(move))
        if done:
            raise UnstableError(
                f"{env_id}: the game seeded {seed} ended at {move!r}, before position {key!r}"
            )
    pid, observation = env.get_observation()
    return Position(key, env_id, env, pid, observation, {m: tuple(s) for m, s in answers.items()})


def uniform_policy(positions: Sequence[Position]) -> list[dict[str, float]]:
    """Each legal move with the same probability (a random legal-move player)."""
    return [{move: 1.0 / len(p.answers) for move in p.answers} for p in positions]


def player_policy(
    factory: Callable[[str, int], Any], seed: int = 0, name: str = "the scripted player"
) -> Policy:
    """A scripted player (its factory `(env_id, seed) -> ScriptedPlayer`) as a policy: probability 1 on the
    legal move it plays at each position, whichever of its spellings it writes. A move that spells none of
    the position's answers is an error naming both: a probe lists every spelling the game accepts, and a
    scripted player plays legal moves."""

    def policy(positions: Sequence[Position]) -> list[dict[str, float]]:
        out = []
        for p in positions:
            move = factory(p.env_id, seed).move(p.env, p.observation)
            played = p.move_of(move)
            if played is None:
                raise UnstableError(
                    f"{p.env_id} position {p.key!r}: {name} played {move!r}, which spells none "
                    f"of the answers there ({', '.join(p.answers)}); list each spelling the game accepts "
                    "under its move"
                )
            out.append({m: float(m == played) for m in p.answers})
        return out

    return policy


def legal_mass(probabilities: Mapping[str, float]) -> float:
    """The policy's probability of answering with any legal move at a position."""
    return float(sum(probabilities.values()))
