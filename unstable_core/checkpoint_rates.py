"""Did the run learn? Rates per checkpoint (policy version), read from a run's `games/games.jsonl`.

For each policy version: the invalid-move and format rates of its training steps (per step), and against
each fixed opponent (eval games, or training games against a fixed model) its win rate W / n and its score
(W + D/2) / n, each a `Rate` with its Wilson interval (for the score, with its half counts, a conservative
bound). `compare_quarters` pools the first and the last quarter of the versions and tests the change of each
rate (the strict win rate, not the score); the per-step rates with a test clustered by game and seat, since
the moves of one seat in one game are not independent trials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from unstable_core.io import read_jsonl
from unstable_core.stats import Comparison, Rate, clustered_two_proportion_test, two_proportion_test

CKPT_PREFIX = "ckpt-"


@attrs.define
class VersionRates:
    """Counts of one policy version (or a pool of versions)."""

    versions: list[int]
    wins: dict[str, int] = attrs.field(factory=dict)  # opponent -> wins
    games: dict[str, int] = attrs.field(factory=dict)  # opponent -> games
    draws: dict[str, int] = attrs.field(factory=dict)  # opponent -> draws
    seats: list[tuple[int, int, int]] = attrs.field(factory=list)  # (steps, invalid, formatted) per game seat

    @property
    def steps(self) -> int:
        return sum(seat[0] for seat in self.seats)

    @property
    def invalid(self) -> int:
        return sum(seat[1] for seat in self.seats)

    @property
    def formatted(self) -> int:
        return sum(seat[2] for seat in self.seats)

    @property
    def invalid_rate(self) -> Rate:
        return Rate(self.invalid, self.steps)

    @property
    def format_rate(self) -> Rate:
        return Rate(self.formatted, self.steps)

    def win_rate(self, opponent: str) -> Rate:
        """W / n against `opponent` (a binomial proportion)."""
        return Rate(self.wins.get(opponent, 0), self.games.get(opponent, 0))

    def score(self, opponent: str) -> Rate:
        """(W + D/2) / n against `opponent`."""
        return Rate(self.wins.get(opponent, 0) + self.draws.get(opponent, 0) / 2, self.games.get(opponent, 0))

    def wdl(self, opponent: str) -> tuple[int, int, int]:
        """Wins, draws and losses against `opponent`."""
        wins, draws = self.wins.get(opponent, 0), self.draws.get(opponent, 0)
        return wins, draws, self.games.get(opponent, 0) - wins - draws

    def add(self, other: VersionRates) -> None:
        self.versions += other.versions
        self.seats += other.seats
        for opp, n in other.games.items():
            self.games[opp] = self.games.get(opp, 0) + n
            self.wins[opp] = self.wins.get(opp, 0) + other.wins.get(opp, 0)
            self.draws[opp] = self.draws.get(opp, 0) + other.draws.get(opp, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "versions": self.versions,
            "invalid_move_rate": self.invalid_rate.to_dict(),
            "format_rate": self.format_rate.to_dict(),
            "win_rate": {opp: self.win_rate(opp).to_dict() for opp in sorted(self.games)},
            "score": {opp: self.score(opp).to_dict() for opp in sorted(self.games)},
        }


def _version_of(uid: str) -> int | None:
    return (
        int(uid[len(CKPT_PREFIX) :])
        if uid.startswith(CKPT_PREFIX) and uid[len(CKPT_PREFIX) :].isdigit()
        else None
    )


def run_games(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every game record of a run: `games/games.jsonl` (training and evaluation games of the run) and the
    `games.jsonl` files under `eval/` (games of `unstable eval`), in that order."""
    run_dir = Path(run_dir)
    records = read_jsonl(run_dir / "games" / "games.jsonl")
    for path in sorted((run_dir / "eval").rglob("games.jsonl")) if (run_dir / "eval").is_dir() else []:
        records += [r for r in read_jsonl(path) if isinstance(r, dict) and "info" in r]
    return records


def rates_by_version(run_dir: str | Path) -> dict[int, VersionRates]:
    """Counts per policy version from the run's finished games (failed games are left out)."""
    return rates_from_games(run_games(run_dir))


def rates_from_games(games: list[dict[str, Any]]) -> dict[int, VersionRates]:
    """Counts per policy version from game records (as in games.jsonl; failed games are left out)."""
    out: dict[int, VersionRates] = {}

    def at(version: int) -> VersionRates:
        return out.setdefault(version, VersionRates(versions=[version]))

    for game in games:
        info = game["info"]
        if info.get("failed"):
            continue
        if not info.get("eval"):
            for traj in game["trajectories"]:
                if not traj.get("collect_data"):
                    continue
                seat: dict[int, list[int]] = {}  # version -> [steps, invalid, formatted] of this game seat
                for s in traj["steps"]:
                    counts = seat.setdefault(s["policy_version"], [0, 0, 0])
                    counts[0] += 1
                    counts[1] += bool(s["invalid_move"])
                    counts[2] += bool(s["format_ok"])
                for version, counts in seat.items():
                    at(version).seats.append(tuple(counts))
        models = {int(pid): uid for pid, uid in info.get("models", {}).items()}
        rewards = {int(pid): r for pid, r in info.get("final_rewards", {}).items()}
        checkpoints = {pid: _version_of(uid) for pid, uid in models.items() if _version_of(uid) is not None}
        fixed = {uid for pid, uid in models.items() if pid not in checkpoints}
        if len(fixed) != 1 or not checkpoints or len(set(checkpoints.values())) != 1 or not rewards:
            continue  # mirror self-play, or a game mixing several fixed models: no win rate to read
        (opponent,) = fixed
        version = next(iter(checkpoints.values()))
        mine = max(rewards[p] for p in checkpoints)
        theirs = max(r for p, r in rewards.items() if p not in checkpoints)
        v = at(version)
        v.games[opponent] = v.games.get(opponent, 0) + 1
        v.wins[opponent] = v.wins.get(opponent, 0) + (mine > theirs)
        v.draws[opponent] = v.draws.get(opponent, 0) + (mine == theirs)
    return dict(sorted(out.items()))


def pool(rates: dict[int, VersionRates], versions: list[int]) -> VersionRates:
    """The counts of several versions added together."""
    total = VersionRates(versions=[])
    for v in versions:
        if v in rates:
            total.add(rates[v])
    return total


@attrs.define
class QuarterComparison:
    """First vs last quarter of the policy versions: the pooled counts and a z-test per rate."""

    first: VersionRates
    last: VersionRates
    tests: dict[str, Comparison]

    def to_dict(self) -> dict[str, Any]:
        return {
            "first": self.first.to_dict(),
            "last": self.last.to_dict(),
            "tests": {name: c.to_dict() for name, c in self.tests.items()},
        }


def compare_quarters(rates: dict[int, VersionRates]) -> QuarterComparison | None:
    """Pool the first and the last quarter of the versions (at least one each) and test every rate (against
    each opponent the win rate W / n; the score is in `first` and `last`); None with fewer than two
    versions."""
    versions = sorted(rates)
    if len(versions) < 2:
        return None
    q = max(1, len(versions) // 4)
    first, last = pool(rates, versions[:q]), pool(rates, versions[-q:])
    tests = {
        "invalid_move_rate": clustered_two_proportion_test(
            [(i, n) for n, i, _ in first.seats], [(i, n) for n, i, _ in last.seats]
        ),
        "format_rate": clustered_two_proportion_test(
            [(f, n) for n, _, f in first.seats], [(f, n) for n, _, f in last.seats]
        ),
    }
    for opp in sorted(set(first.games) | set(last.games)):
        tests[f"win_rate_vs_{opp}"] = two_proportion_test(first.win_rate(opp), last.win_rate(opp))
    return QuarterComparison(first, last, tests)
