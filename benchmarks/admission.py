"""The admission's promises over pipeline shapes, simulated on the real buffers (no model, no Ray; seconds):
groups G, training steps per game L, max staleness S and batch size B. Per shape and policy: updates made
of those asked, the worst staleness of a batch against S, steps played, used and lost (stale, evicted or
cut with a group), and the largest batch. Rows are summed over L and B per (G, S) unless --full.

    python3 benchmarks/admission.py            # G 1-8, L 1-12, S 0-3, B 4-32; budget against drop
    python3 benchmarks/admission.py --full     # one row per shape
"""

from __future__ import annotations

import argparse
import itertools
from collections import defaultdict

from unstable_core.testing.admission_sim import Outcome, Shape, simulate

GROUPS, STEPS, STALENESS, BATCHES = (1, 2, 4, 8), (1, 3, 8, 12), (0, 1, 2, 3), (4, 8, 16, 32)
UPDATES = 12


def row(label: str, outcomes: list[Outcome], max_staleness: int) -> str:
    played = sum(o.generated for o in outcomes)
    lost = sum(o.lost for o in outcomes)
    updates = sum(o.updates for o in outcomes)
    worst = max(o.worst_staleness for o in outcomes)
    return (
        f"| {label} | {updates}/{UPDATES * len(outcomes)} | {worst} (S={max_staleness}) | {played} | "
        f"{sum(o.used for o in outcomes)} | {lost} ({lost / played:.1%}) | {max(o.largest_batch for o in outcomes)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="one row per shape")
    args = parser.parse_args()
    print("| policy, G, S (L, B) | updates | worst staleness | played | used | lost | largest batch |")
    print("|---|---|---|---|---|---|---|")
    stalled = breached = lost_budget = 0
    for policy in ("budget", "drop"):
        summed: dict[tuple[int, int], list[Outcome]] = defaultdict(list)
        for g, l, s, b in itertools.product(GROUPS, STEPS, STALENESS, BATCHES):  # noqa: E741
            outcome = simulate(Shape(g, l, s, b, updates=UPDATES, admission=policy))
            summed[(g, s)].append(outcome)
            if policy == "budget":
                stalled += outcome.stalled
                breached += outcome.worst_staleness > s
                lost_budget += outcome.lost
            if args.full:
                print(row(f"{policy}, G={g}, S={s} (L={l}, B={b})", [outcome], s))
        if not args.full:
            for (g, s), outcomes in sorted(summed.items()):
                print(row(f"{policy}, G={g}, S={s}", outcomes, s))
    shapes = len(GROUPS) * len(STEPS) * len(STALENESS) * len(BATCHES)
    print(
        f"\nbudget over {shapes} shapes: {stalled} stalled, {breached} over the staleness bound, "
        f"{lost_budget} steps lost"
    )


if __name__ == "__main__":
    main()
