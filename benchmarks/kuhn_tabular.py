"""The Kuhn recipe's learning signal with a perfect function approximator: a table of logits per
information set in place of the model, everything else as the recipe does it.

    python3 benchmarks/kuhn_tabular.py                      # the default rows, 3 seeds, 55 updates
    python3 benchmarks/kuhn_tabular.py --updates 120 --seeds 5
    python3 benchmarks/kuhn_tabular.py --lr-schedule linear  # the step falls to 1/updates of it by the last

Each update plays hands by mirror self-play until `--batch` states are visited, values every legal move of
each visited state by playing it and continuing the hand `--continuations` times with the current policy
(the opponent's real card kept, as `--branch-samples` does), computes MMD's target with the `mmd` plugin's
own `mmd_target`, and takes `fit_steps` gradient steps of the cross-entropy on the logits (its gradient is
q - target, summed over the batch's states) with step size `lr`. The exploitability is OpenSpiel's, exact. Where a row reaches the target
here and the recipe does not, the gap is the model's fit, not the signal.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from typing import Any

from unstable_core.cli.options import add_config_argument

ROWS = [  # (eta, alpha, lr, fit_steps): the recipe's settings and the levers beside them
    (1.0, 0.5, 0.03, 1),
    (1.0, 0.2, 0.03, 4),
    (1.0, 0.5, 0.3, 1),
    (1.0, 0.5, 1.0, 1),
    (1.0, 0.2, 0.3, 4),
    (1.0, 0.2, 1.0, 1),
    (1.0, 0.1, 1.0, 1),
    (1.0, 0.1, 3.0, 1),
    (1.0, 0.1, 0.1, 1),
]
TERMINAL = ("pp", "bp", "bb", "pbp", "pbb")


def mover(history: str) -> int:
    """OpenSpiel's player to act after `history` (p: pass/check/fold, b: bet/call)."""
    return len(history) % 2


def payoff(history: str, cards: tuple[int, int]) -> int:
    """Player 0's chips at a terminal history."""
    if history == "bp":
        return 1
    if history == "pbp":
        return -1
    stake = 2 if history.endswith("bb") else 1
    return stake if cards[0] > cards[1] else -stake


class Table:
    """Logits [2] (pass, bet) per information set, keyed as OpenSpiel keys them: card then history."""

    def __init__(self) -> None:
        self.logits: dict[str, list[float]] = {}

    def bet(self, key: str) -> float:
        """q(bet) at an information set."""
        y = self.logits.setdefault(key, [0.0, 0.0])
        return 1.0 / (1.0 + math.exp(y[0] - y[1]))

    def play_out(self, history: str, cards: tuple[int, int], rng: random.Random) -> str:
        """The hand from `history` to its end, both seats playing the table."""
        while history not in TERMINAL:
            history += "b" if rng.random() < self.bet(f"{cards[mover(history)]}{history}") else "p"
        return history

    def exploitability(self) -> float:
        """OpenSpiel's exploitability of the table."""
        import pyspiel
        from open_spiel.python import policy as os_policy
        from open_spiel.python.algorithms.exploitability import exploitability

        game = pyspiel.load_game("kuhn_poker")
        table = os_policy.TabularPolicy(game)
        for key, row in table.state_lookup.items():
            bet = self.bet(key)
            table.action_probability_array[row] = [1.0 - bet, bet]
        return float(exploitability(game, table))


def hands_won_against_uniform(bet: Callable[[str], float]) -> float:
    """The share of hands a policy wins against a player uniform over its two moves, over the 6 deals and
    both seats, exactly; `bet(key)` is its q(bet) at an information set (card then history). A Nash policy
    wins 0.458-0.500 of them (it wins chips, +0.11 to +0.17 a hand, not hands), always betting and calling
    0.688 (exploitability 1/3): the Kuhn recipe's hands-won target against random pulls away from low exploitability."""
    won = 0.0

    def walk(history: str, cards: tuple[int, int], seat: int, p: float) -> None:
        nonlocal won
        if history in TERMINAL:
            won += p * ((payoff(history, cards) > 0) == (seat == 0))
            return
        to_act = mover(history)
        q = bet(f"{cards[to_act]}{history}") if to_act == seat else 0.5
        walk(history + "b", cards, seat, p * q)
        walk(history + "p", cards, seat, p * (1.0 - q))

    for cards in [(a, b) for a in range(3) for b in range(3) if a != b]:
        for seat in (0, 1):
            walk("", cards, seat, 1.0 / 12)
    return won


def visited_states(table: Table, batch: int, continuations: int, rng: random.Random) -> list[tuple]:
    """(key, values [pass, bet] for the mover) of `batch` states visited by self-play, each branched."""
    states = []
    while len(states) < batch:
        cards = tuple(rng.sample(range(3), 2))
        history = ""
        while history not in TERMINAL and len(states) < batch:
            seat = mover(history)
            values = [0.0, 0.0]
            for a, move in enumerate("pb"):
                for _ in range(continuations):
                    end = table.play_out(history + move, cards, rng)
                    values[a] += payoff(end, cards) * (1 if seat == 0 else -1) / continuations
            key = f"{cards[seat]}{history}"
            states.append((key, values))
            history += "b" if rng.random() < table.bet(key) else "p"
    return states


def train(
    row: tuple,
    updates: int,
    batch: int,
    continuations: int,
    seed: int,
    every: int,
    schedule: str = "constant",
) -> list[float]:
    """The exploitability every `every` updates of one row and seed; the step falls as `--lr-schedule` has a
    run's learning rate fall over `updates`."""
    import torch
    from unstable_mmd.learner import mmd_target

    from unstable_core.learners.settings import lr_factor

    eta, alpha, lr, fit_steps = row
    rng, table, curve = random.Random(seed), Table(), []
    for update in range(1, updates + 1):
        states = visited_states(table, batch, continuations, rng)
        targets = []
        for key, values in states:
            logq = torch.tensor(table.logits[key]).log_softmax(-1)
            targets.append(mmd_target(logq, torch.tensor(values), eta, alpha, torch.zeros(2)).tolist())
        step = lr * lr_factor(schedule, update - 1, updates)
        for _ in range(fit_steps):
            grads: dict[str, list[float]] = {}
            for (key, _), target in zip(states, targets, strict=True):
                q = table.bet(key)
                g = grads.setdefault(key, [0.0, 0.0])
                g[0] += (1.0 - q) - target[0]
                g[1] += q - target[1]
            for key, g in grads.items():
                table.logits[key] = [y - step * d for y, d in zip(table.logits[key], g, strict=True)]
        if update % every == 0 or update == updates:
            curve.append(table.exploitability())
    return curve


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--updates", type=int, default=55)
    parser.add_argument("--batch", type=int, default=16, help="visited states per update")
    parser.add_argument("--continuations", type=int, default=2, help="continuations per legal move")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--every", type=int, default=10)
    add_config_argument(parser, "--lr-schedule")  # the step of every row falls over --updates as a run's rate
    args = parser.parse_args(argv)
    if min(args.updates, args.batch, args.continuations, args.seeds, args.every) < 1:
        print(
            "kuhn_tabular.py: --updates, --batch, --continuations, --seeds and --every must be >= 1",
            file=sys.stderr,
        )
        sys.exit(2)
    head = (
        f"exploitability every {args.every} updates (mean over {args.seeds} seeds, {args.lr_schedule} step)"
    )
    print(f"| eta | alpha | step | fit steps | {head} | last, min-max |")
    print("|---|---|---|---|---|---|")
    for row in ROWS:
        curves = [
            train(row, args.updates, args.batch, args.continuations, s, args.every, args.lr_schedule)
            for s in range(args.seeds)
        ]
        means = [sum(c[i] for c in curves) / len(curves) for i in range(len(curves[0]))]
        last = [c[-1] for c in curves]
        print(f"| {row[0]:g} | {row[1]:g} | {row[2]:g} | {row[3]} | {' '.join(f'{m:.3f}' for m in means)} | "
              f"{means[-1]:.3f}, {min(last):.3f}-{max(last):.3f} |")  # fmt: skip


def run_row(row: tuple, **kwargs: Any) -> list[float]:
    """One row's curve (for tests): `train` with the command's defaults."""
    options = {"updates": 55, "batch": 16, "continuations": 2, "seed": 0, "every": 10, **kwargs}
    return train(row, **options)


if __name__ == "__main__":
    main()
