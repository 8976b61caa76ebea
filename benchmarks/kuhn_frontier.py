"""How many hands against random play can a Kuhn Poker policy win at a given exploitability? Exactly.

    python3 benchmarks/kuhn_frontier.py                  # eps 0.10 ... 1/3
    python3 benchmarks/kuhn_frontier.py --eps 0.15 --hands 256

The Kuhn recipe asks for both exploitability <= 0.15 and, against `random`, a Wilson 95% lower bound
above 0.55 over 256 hands. The two pull apart (a Nash policy wins 0.46-0.50 of the hands against random,
betting and calling with every card 0.69 at exploitability 1/3), so this computes the frontier:

    max hands_won(policy)  s.t.  exploitability(policy) <= eps

over behaviour policies of both seats, where hands_won is `kuhn_tabular.hands_won_against_uniform` (the
chance of winning the hand against a player uniform over its two moves, over the 6 deals and both seats)
and exploitability is OpenSpiel's ((BR_0 + BR_1) / 2). In the sequence form (Koller, Megiddo and von
Stengel) both are exact and the problem is one linear program: seat i plays a realization plan r_i >= 0
with E_i r_i = e_i; hands_won is linear in (r_0, r_1); seat 1's best-response value against r_0 is
max over r_1' of -r_0^T A r_1' = min {e_1 . v : E_1^T v >= -A^T r_0} by LP duality (likewise seat 0's),
so "exploitability <= eps" is: some u, v with E_0^T u >= A r_1, E_1^T v >= -A^T r_0 and
e_0 . u + e_1 . v <= 2 eps. Each solution's behaviour policy is checked against `kuhn_tabular`'s
OpenSpiel exploitability and hands_won. Printed per eps: the maximum, and the chance that a policy at it
wins enough of `--hands` hands for the lower bound to pass.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, also when imported
from kuhn_tabular import TERMINAL, Table, hands_won_against_uniform, mover, payoff  # noqa: E402

DEALS = [(a, b) for a in range(3) for b in range(3) if a != b]
EPSILONS = (0.10, 0.12, 0.15, 0.17, 0.20, 1 / 3)
Sequence = tuple[str, str] | None  # (information set, move) or the empty sequence


class SequenceForm:
    """Kuhn Poker's sequence form: each seat's sequences, E_i, the payoff matrix A (seat 0's chips, the
    deals averaged) and the hands-won coefficients h_i of each seat's last sequence."""

    def __init__(self) -> None:
        self.seqs: list[list[Sequence]] = [[None], [None]]
        self.parent: list[dict[str, Sequence]] = [{}, {}]  # information set -> the seat's previous sequence
        ends = [end for cards in DEALS for end in self._walk("", cards, [None, None])]
        self.index = [{q: j for j, q in enumerate(s)} for s in self.seqs]
        self.A = np.zeros((len(self.seqs[0]), len(self.seqs[1])))
        self.h = [np.zeros(len(self.seqs[0])), np.zeros(len(self.seqs[1]))]
        for cards, history, last in ends:
            chips = payoff(history, cards)
            j0, j1 = self.index[0][last[0]], self.index[1][last[1]]
            self.A[j0, j1] += chips / len(DEALS)
            moves = [sum(mover(history[:t]) == seat for t in range(len(history))) for seat in (0, 1)]
            # won against a uniform opponent: the opponent's moves on the path each 1/2; 12 deal-seat pairs
            self.h[0][j0] += (chips > 0) * 0.5 ** moves[1] / 12
            self.h[1][j1] += (chips < 0) * 0.5 ** moves[0] / 12
        self.E = [self._constraints(seat) for seat in (0, 1)]

    def _walk(self, history: str, cards: tuple[int, int], last: list[Sequence]) -> list[tuple]:
        if history in TERMINAL:
            return [(cards, history, tuple(last))]
        seat = mover(history)
        key = f"{cards[seat]}{history}"
        self.parent[seat].setdefault(key, last[seat])
        ends = []
        for move in "pb":
            if (key, move) not in self.seqs[seat]:
                self.seqs[seat].append((key, move))
            ends += self._walk(history + move, cards, [*last[:seat], (key, move), *last[seat + 1 :]])
        return ends

    def _constraints(self, seat: int) -> Any:
        """E_seat: the empty sequence weighs 1; an information set's two sequences sum to its parent's."""
        index = self.index[seat]
        E = np.zeros((1 + len(self.parent[seat]), len(self.seqs[seat])))
        E[0, index[None]] = 1.0
        for row, (key, parent) in enumerate(self.parent[seat].items(), start=1):
            E[row, index[(key, "p")]] = E[row, index[(key, "b")]] = 1.0
            E[row, index[parent]] = -1.0
        return E

    def behaviour(self, r: list[Any]) -> dict[str, float]:
        """q(bet) per information set from the realization plans (0.5 where the policy never gets)."""
        bet = {}
        for seat in (0, 1):
            for key, parent in self.parent[seat].items():
                weight = r[seat][self.index[seat][parent]]
                bet[key] = float(r[seat][self.index[seat][(key, "b")]] / weight) if weight > 1e-12 else 0.5
        return bet


def frontier(form: SequenceForm, eps: float) -> tuple[float, dict[str, float]]:
    """(max hands_won at exploitability <= eps, a policy that reaches it), by one LP (HiGHS)."""
    from scipy.optimize import linprog

    (E0, E1), A = form.E, form.A
    n0, n1, m0, m1 = A.shape[0], A.shape[1], E0.shape[0], E1.shape[0]
    r0, r1 = slice(0, n0), slice(n0, n0 + n1)
    u, v = slice(n0 + n1, n0 + n1 + m0), slice(n0 + n1 + m0, n0 + n1 + m0 + m1)
    size = v.stop
    eq = np.zeros((m0 + m1, size))
    eq[:m0, r0], eq[m0:, r1] = E0, E1
    b_eq = np.concatenate([np.eye(m0)[0], np.eye(m1)[0]])
    br0, br1, bound = np.zeros((n0, size)), np.zeros((n1, size)), np.zeros((1, size))
    br0[:, r1], br0[:, u] = A, -E0.T  # A r_1 <= E_0^T u
    br1[:, r0], br1[:, v] = -A.T, -E1.T  # -A^T r_0 <= E_1^T v
    bound[0, u], bound[0, v] = np.eye(m0)[0], np.eye(m1)[0]  # e_0 . u + e_1 . v <= 2 eps
    won = np.zeros(size)
    won[r0], won[r1] = form.h[0], form.h[1]
    found = linprog(
        -won, A_ub=np.vstack([br0, br1, bound]), b_ub=np.concatenate([np.zeros(n0 + n1), [2 * eps]]),
        A_eq=eq, b_eq=b_eq, bounds=[(0, None)] * (n0 + n1) + [(None, None)] * (m0 + m1), method="highs",
    )  # fmt: skip
    if found.status != 0:
        raise RuntimeError(f"the LP at eps {eps} did not solve: {found.message}")
    return float(won @ found.x), form.behaviour([found.x[r0], found.x[r1]])


class _Fixed(Table):
    """kuhn_tabular's Table with given bet probabilities, for its OpenSpiel exploitability."""

    def __init__(self, bet: dict[str, float]) -> None:
        super().__init__()
        self.fixed = bet

    def bet(self, key: str) -> float:
        return self.fixed[key]


def checked(bet: dict[str, float]) -> tuple[float, float]:
    """(OpenSpiel's exploitability, hands_won) of the policy, computed apart from the LP."""
    return _Fixed(bet).exploitability(), hands_won_against_uniform(bet.__getitem__)


def wilson_lower(wins: float, n: int, z: float = 1.96) -> float:
    """The Wilson score interval's lower bound of wins / n."""
    p = wins / n
    centre, spread = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def main(argv: list[str] | None = None) -> None:
    from scipy.stats import binom

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--eps", type=float, action="append", help="exploitability bounds (default: a range)")
    parser.add_argument("--hands", type=int, default=256, help="hands against random the target counts")
    parser.add_argument("--lower-bound", type=float, default=0.55, help="the Wilson lower bound to pass")
    args = parser.parse_args(argv)
    if args.hands < 1 or any(not 0 <= e <= 1 for e in args.eps or ()):
        parser.error("--hands must be >= 1 and each --eps in [0, 1]")
    form = SequenceForm()
    need = next((k for k in range(args.hands + 1) if wilson_lower(k, args.hands) > args.lower_bound), None)
    print(f"wins of {args.hands} hands whose Wilson lower bound exceeds {args.lower_bound}: {need}")
    print("| eps | max hands won vs random | OpenSpiel exploitability, hands won (checked) | P(passing) |")
    print("|---|---|---|---|")
    for eps in args.eps or EPSILONS:
        best, bet = frontier(form, eps)
        exploitability, won = checked(bet)
        if exploitability > eps + 1e-6 or abs(won - best) > 1e-6:
            raise SystemExit(
                f"kuhn_frontier: the LP's policy at eps {eps} does not check out: {exploitability}, {won}"
            )
        passing = float(binom.sf(need - 1, args.hands, best)) if need is not None else 0.0
        print(f"| {eps:.3f} | {best:.4f} | {exploitability:.4f}, {won:.4f} | {passing:.2f} |")
        if math.isclose(eps, 0.15):
            print(
                "  at 0.15, q(bet) per information set: "
                + ", ".join(f"{k} {bet[k]:.2f}" for k in sorted(bet))
            )


if __name__ == "__main__":
    main()
