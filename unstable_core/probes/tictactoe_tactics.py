"""TicTacToe tactics: how much of a policy's probability goes to the right cell where one move matters.

The positions come from real games (`generate_positions`: TextArena TicTacToe, random against random, the
games seeded 0, 1, ...): a `win` position is one where the mover can complete a line (the right cells:
those that do); a `block` position one where the mover cannot, and the opponent threatens to complete
exactly one (the right cell: the one that stops it; under a double threat no move saves the game). Each game gives at most one of each, so the set spans many games. The set is committed as
`tictactoe_tactics.json` (tests/test_probes_tictactoe_tactics.py regenerates it) and replayed move by move on a
real env of the asked id, so that the prompt is the one a run renders there, history included.

Figures: `win_mass` and `block_mass`, the policy's mean probability of answering with a right cell (not
renormalised: an illegal answer loses the game), with a Student-t 95% interval over the positions, beside
the same mass for a uniformly random legal move (exact); `illegal_mass`, the mean probability of an
answer the game refuses, over all positions.
"""

from __future__ import annotations

import itertools
import json
from importlib import resources
from typing import Any

from unstable_core.errors import UnstableError
from unstable_core.games.env_ops import action_receiver, make_env
from unstable_core.games.players.tictactoe import (
    board_of,
    empty_cells,
    mover_mark,
    other,
    winning_cells,
)
from unstable_core.probes.base import Policy, Position, legal_mass
from unstable_core.probes.figures import Figure, ProbeResult

NAME = "tictactoe-tactics"
DEFAULT_ENV = "TicTacToe-v0-train"
DATA_FILE = "tictactoe_tactics.json"
COUNT = 32  # positions of each kind
KINDS = ("win", "block")


def right_cells(env: Any) -> tuple[str, list[int]] | None:
    """("win", the winning cells) or ("block", [the one cell that stops the opponent's line]) for the
    mover of `env`; None when neither (a double threat is no block position: no move saves the game)."""
    board, mark = board_of(env), mover_mark(env)
    wins = winning_cells(board, mark)
    if wins:
        return "win", wins
    blocks = winning_cells(board, other(mark))
    return ("block", blocks) if len(blocks) == 1 else None


def generate_positions(
    count: int = COUNT, first_seed: int = 0, env_id: str = DEFAULT_ENV
) -> list[dict[str, Any]]:
    """`count` win and `count` block positions from real random-against-random games seeded `first_seed`,
    `first_seed + 1`, ...: each {kind, seed, moves (the cells played), right (the right cells)}, at most one
    of each kind per game, win positions first."""
    from unstable_core.games.players.catalogue import seat_seed
    from unstable_core.games.players.random_move import RANDOM, RandomPlayer

    found: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for seed in itertools.count(first_seed):
        if all(len(found[kind]) >= count for kind in KINDS):
            break
        env = make_env(env_id)
        env.reset(num_players=2, seed=seed)
        receive = action_receiver(env)
        players = {pid: RandomPlayer(env_id, seat_seed(RANDOM, seed, pid)) for pid in (0, 1)}
        moves: list[int] = []
        taken: set[str] = set()
        done = False
        while not done:
            pid, observation = env.get_observation()
            kind_cells = right_cells(env)
            if kind_cells is not None:
                kind, cells = kind_cells
                if kind not in taken and len(found[kind]) < count:
                    taken.add(kind)
                    found[kind].append({"kind": kind, "seed": seed, "moves": list(moves), "right": cells})
            move = players[pid].move(env, observation)
            moves.append(int(move.strip("[]")))
            done, _ = env.step(receive(move))
    return found["win"] + found["block"]


def load_positions() -> list[dict[str, Any]]:
    """The committed positions (see `generate_positions`)."""
    text = resources.files("unstable_core.probes").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return json.loads(text)["positions"]


def replay(env_id: str, record: dict[str, Any]) -> Position:
    """A real env of `env_id` at a recorded position, its right cells checked against the board."""
    env = make_env(env_id)
    env.reset(num_players=2, seed=record["seed"])
    receive = action_receiver(env)
    for cell in record["moves"]:
        done, _ = env.step(receive(f"[{cell}]"))
        if done:
            raise UnstableError(f"{env_id}: the game of position {record} ended before it")
    pid, observation = env.get_observation()
    if right_cells(env) != (record["kind"], record["right"]):
        raise UnstableError(
            f"{env_id}: the board after {record['moves']} is not the recorded {record['kind']}"
        )
    answers = {f"[{c}]": (f"[{c}]",) for c in empty_cells(board_of(env))}
    key = f"{record['kind']}:{''.join(map(str, record['moves']))}"
    return Position(key, env_id, env, pid, observation, answers)


class TicTacToeTactics:
    """Probe `tictactoe-tactics`: the mass on winning and blocking cells at the committed positions."""

    default_env = DEFAULT_ENV

    def check(self, env_id: str) -> None:
        """Nothing to install."""

    def __call__(self, policy: Policy, env_id: str) -> ProbeResult:
        records = load_positions()
        positions = [replay(env_id, r) for r in records]
        found = policy(positions)
        right: dict[str, list[float]] = {kind: [] for kind in KINDS}
        uniform: dict[str, list[float]] = {kind: [] for kind in KINDS}
        illegal, details = [], []
        for record, position, probs in zip(records, positions, found, strict=True):
            mass = sum(probs[f"[{c}]"] for c in record["right"])
            right[record["kind"]].append(mass)
            uniform[record["kind"]].append(len(record["right"]) / len(position.answers))
            illegal.append(1.0 - legal_mass(probs))
            details.append(
                {"key": position.key, "seat": position.pid, "right": record["right"], "right_mass": mass,
                 "legal_mass": legal_mass(probs), "probabilities": dict(probs)}
            )  # fmt: skip
        figures = {f"{kind}_mass": Figure.mean(right[kind]) for kind in KINDS}
        figures["illegal_mass"] = Figure.mean(illegal)
        references = {
            f"{kind}_mass": {"uniform": sum(uniform[kind]) / len(uniform[kind]), "optimal": 1.0}
            for kind in KINDS
        }
        references["illegal_mass"] = {"uniform": 0.0}
        return ProbeResult(NAME, env_id, figures, references, details)
