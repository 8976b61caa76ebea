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

from unstable_core.envs.tasks import SOLO
from unstable_core.io import read_jsonl
from unstable_core.report.stats import (
    Comparison,
    Rate,
    TurnRates,
    clustered_two_proportion_test,
    two_proportion_test,
)

CKPT_PREFIX = "ckpt-"


@attrs.define
class VersionRates(TurnRates):
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


def run_games(run_dir: str | Path, skipped: dict[Path, list[int]] | None = None) -> list[dict[str, Any]]:
    """Every game record of a run: `games/games.jsonl` (training and evaluation games of the run) and the
    `games.jsonl` files under `eval/` (games of `unstable eval`), in that order. Lines that are not JSON (cut
    short by a crash) are left out; with `skipped`, their numbers are put there by file."""
    run_dir = Path(run_dir)
    paths = [run_dir / "games" / "games.jsonl"]
    paths += sorted((run_dir / "eval").rglob("games.jsonl")) if (run_dir / "eval").is_dir() else []
    records: list[dict[str, Any]] = []
    for path in paths:
        bad: list[int] = []
        records += [r for r in read_jsonl(path, bad) if isinstance(r, dict) and "info" in r]
        if bad and skipped is not None:
            skipped[path] = bad
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
        if len(models) == 1 and checkpoints:
            fixed = {SOLO}  # a task: a win is a correct answer
        if len(fixed) != 1 or not checkpoints or len(set(checkpoints.values())) != 1 or not rewards:
            continue  # mirror self-play, or a game mixing several fixed models: no win rate to read
        (opponent,) = fixed
        version = next(iter(checkpoints.values()))
        mine = max(rewards[p] for p in checkpoints)
        theirs = max((r for p, r in rewards.items() if p not in checkpoints), default=0.0)
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


STEP_RATES = ("invalid_move_rate", "format_rate")
WIN_PREFIX = "win_rate_vs_"


def has_data(r: VersionRates, name: str) -> bool:
    """Whether version counts `r` hold data for the rate `name` (training turns, or games against the
    opponent of `win_rate_vs_<opponent>`)."""
    return r.steps > 0 if name in STEP_RATES else r.games.get(name[len(WIN_PREFIX) :], 0) > 0


@attrs.define
class QuarterComparison:
    """First vs last quarter of the policy versions that have data for each rate: `versions` lists those
    versions per rate, `quarters` the pooled counts of the two quarters and `tests` the test of each rate
    with two or more such versions."""

    versions: dict[str, list[int]]
    quarters: dict[str, tuple[VersionRates, VersionRates]]
    tests: dict[str, Comparison]

    def to_dict(self) -> dict[str, Any]:
        return {
            name: {
                "versions": self.versions[name],
                "first_versions": self.quarters[name][0].versions if name in self.tests else [],
                "last_versions": self.quarters[name][1].versions if name in self.tests else [],
                **(self.tests[name].to_dict() if name in self.tests else {}),
            }
            for name in self.versions
        }


def _test(name: str, first: VersionRates, last: VersionRates) -> Comparison:
    if name == "invalid_move_rate":
        return clustered_two_proportion_test(
            [(i, n) for n, i, _ in first.seats], [(i, n) for n, i, _ in last.seats]
        )
    if name == "format_rate":
        return clustered_two_proportion_test(
            [(f, n) for n, _, f in first.seats], [(f, n) for n, _, f in last.seats]
        )
    opponent = name[len(WIN_PREFIX) :]
    return two_proportion_test(first.win_rate(opponent), last.win_rate(opponent))


def compare_quarters(rates: dict[int, VersionRates]) -> QuarterComparison:
    """For each rate (invalid-move and format rate per turn; against each opponent the win rate W / n, the
    score being in `quarters`), pool the first and the last quarter (at least one each) of the versions
    that have data for it, and test the change. Per rate, because the last checkpoint plays no training
    game after the last update and ckpt-0 plays no scheduled evaluation: a rate with data in fewer than
    two versions has no test."""
    opponents = sorted({opp for r in rates.values() for opp in r.games})
    cmp = QuarterComparison({}, {}, {})
    for name in (*STEP_RATES, *(WIN_PREFIX + opp for opp in opponents)):
        versions = [v for v in sorted(rates) if has_data(rates[v], name)]
        cmp.versions[name] = versions
        if len(versions) < 2:
            continue
        q = max(1, len(versions) // 4)
        first, last = pool(rates, versions[:q]), pool(rates, versions[-q:])
        cmp.quarters[name] = (first, last)
        cmp.tests[name] = _test(name, first, last)
    return cmp
