"""A run's leaderboard: every checkpoint and fixed opponent with its TrueSkill rating, its results, and
each checkpoint's win rate W / n and score (W + D/2) / n against each fixed opponent with Wilson 95%
intervals; as a table, JSON and a picture (the command is `unstable leaderboard`, in `cli/leaderboard.py`).

Ratings and W/D/L come from the run's league file (`league_path`; W/D/L count rated games; mirror
self-play is in `games` but rates nobody); win rates and scores come from the games themselves
(`checkpoint_rates`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from unstable_core.envs.tasks import SOLO
from unstable_core.errors import UnstableError
from unstable_core.league.league import LEAGUE_FILE, league_path
from unstable_core.report.checkpoint_rates import VersionRates, rates_from_games, run_games
from unstable_core.report.labels import SELF_PLAY_CAPTION, results_text
from unstable_core.report.stats import Rate


@attrs.define
class Entry:
    """One model of the leaderboard."""

    uid: str
    kind: str
    version: int | None
    mu: float
    sigma: float
    games: int
    wins: int
    draws: int
    losses: int
    # opponent -> (win rate W/n, score (W + D/2)/n, W/D/L)
    vs: dict[str, tuple[Rate, Rate, tuple[int, int, int]]] = attrs.field(factory=dict)

    @property
    def conservative(self) -> float:
        return self.mu - 3 * self.sigma

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "kind": self.kind,
            "version": self.version,
            "mu": self.mu,
            "sigma": self.sigma,
            "mu_minus_3sigma": self.conservative,
            "games": self.games,
            "wins": self.wins,
            "draws": self.draws,
            "losses": self.losses,
            "win_rate_vs": {
                opp: {**rate.to_dict(), "wins": w, "draws": d, "losses": lo, "score": score.to_dict()}
                for opp, (rate, score, (w, d, lo)) in self.vs.items()
            },
        }


def load_league(run_dir: Path) -> dict[str, Any]:
    """A run's league as its file holds it (`League.to_dict`)."""
    path = league_path(run_dir)
    if not path.is_file():
        raise UnstableError(
            f"{run_dir} has no {LEAGUE_FILE}: give the directory of a run (runs/<name>), "
            "made by `unstable run` or `unstable play`"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UnstableError(f"{path} is not valid JSON ({exc}); the run may have been cut short") from None


def leaderboard(run_dir: str | Path) -> list[Entry]:
    """Every active model of the run, best conservative rating (mu - 3 sigma) first."""
    run_dir = Path(run_dir)
    league = load_league(run_dir)
    rates: dict[int, VersionRates] = rates_from_games(run_games(run_dir))
    entries = []
    for m in league.get("models", []):
        if not m.get("active", True):
            continue  # the rating anchor of one-player games, never an opponent
        version = m["iteration"] if m["kind"] == "checkpoint" else None
        entry = Entry(
            uid=m["uid"],
            kind=m["kind"],
            version=version,
            mu=m["mu"],
            sigma=m["sigma"],
            games=m["games"],
            wins=m["wins"],
            draws=m["draws"],
            losses=m["losses"],
        )
        if version is not None and version in rates:
            r = rates[version]
            entry.vs = {opp: (r.win_rate(opp), r.score(opp), r.wdl(opp)) for opp in sorted(r.games)}
        entries.append(entry)
    return sorted(entries, key=lambda e: -e.conservative)


def vs_label(opponent: str) -> str:
    """`vs base`; for the answers to tasks (one-player games), `task accuracy`."""
    return "task accuracy" if opponent == SOLO else f"vs {opponent}"


def opponents_of(entries: list[Entry]) -> list[str]:
    return sorted({opp for e in entries for opp in e.vs})


def leaderboard_table(entries: list[Entry], title: str) -> Any:
    from rich.table import Table

    table = Table(
        title=title,
        caption="vs: win rate W/n [95% Wilson interval] W/D/L, score (W + D/2)/n (its interval in --json); "
        f"task accuracy: correct/n, W/D/L counting correct/-/wrong; {SELF_PLAY_CAPTION}",
    )
    for col in ("#", "model", "kind", "mu", "sigma", "mu-3σ", "games", "W/D/L"):
        table.add_column(col, justify="left" if col in ("model", "kind") else "right", no_wrap=True)
    opponents = opponents_of(entries)
    for opp in opponents:
        table.add_column(vs_label(opp), no_wrap=True)
    for i, e in enumerate(entries, 1):
        cells = []
        for opp in opponents:
            if opp in e.vs:
                rate, score, (w, d, lo_) = e.vs[opp]
                low, high = rate.interval
                cells.append(f"{rate.rate:.2f} [{low:.2f},{high:.2f}] {w}/{d}/{lo_} score {score.rate:.2f}")
            else:
                cells.append("-")
        table.add_row(
            str(i),
            e.uid,
            "ckpt" if e.kind == "checkpoint" else e.kind,
            f"{e.mu:.2f}",
            f"{e.sigma:.2f}",
            f"{e.conservative:.2f}",
            str(e.games),
            results_text(e.games, e.wins, e.draws, e.losses),
            *cells,
        )
    return table


def plot_leaderboard(entries: list[Entry], path: Path, title: str) -> Path:
    """Left: mu with its mu +- 3 sigma bar per model (best first); right, when there is any: each
    checkpoint's win rate against each fixed opponent with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    opponents = opponents_of(entries)
    ncols = 2 if opponents else 1
    height = max(3.0, 0.28 * len(entries) + 1.2)
    fig, axes = plt.subplots(1, ncols, figsize=(6 * ncols, height), squeeze=False)
    ax = axes[0, 0]
    ys = list(range(len(entries)))[::-1]
    for y, e in zip(ys, entries, strict=True):
        color = "tab:blue" if e.kind == "checkpoint" else "tab:orange"
        ax.errorbar(e.mu, y, xerr=3 * e.sigma, fmt="o", color=color, capsize=3)
        ax.plot([e.conservative], [y], marker="|", color="black", markersize=10)
    ax.set_yticks(ys, [e.uid for e in entries], fontsize=7)
    ax.set_xlabel("TrueSkill mu (bar: mu ± 3 sigma; tick: mu - 3 sigma)")
    ax.set_title("ratings (blue: checkpoints, orange: fixed)", fontsize=9)
    if opponents:
        ax = axes[0, 1]
        ckpts = sorted((e for e in entries if e.version is not None), key=lambda e: e.version)
        for opp in opponents:
            pts = [(e.version, e.vs[opp][0]) for e in ckpts if opp in e.vs and e.vs[opp][0].n]
            xs = [v for v, _ in pts]
            ax.fill_between(xs, [r.interval[0] for _, r in pts], [r.interval[1] for _, r in pts], alpha=0.2)
            ax.plot(xs, [r.rate for _, r in pts], marker="o", label=vs_label(opp))
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("checkpoint (learner step)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("win rate W/n, 95% interval")
        ax.legend(fontsize=7)
        ax.set_title("win rate against fixed opponents", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
