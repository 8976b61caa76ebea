"""What `unstable eval` reports per (model, opponent, env) (per (model, task) for a task: correct answers,
accuracy with its Wilson interval, answered and boxed rates, tokens per answer): W/D/L, win rate W/n and score (W + D/2)/n with
Wilson 95% intervals (the score's, with its half counts, a conservative bound), the mean final reward, the
model's invalid-move and format rates per turn (with n and interval), mean game length in turns and the
model's completion tokens per turn (an API model's from the server's `usage`; none for `random`); as a
table, plain text, or JSON. The model's turns are those of its seat in each game."""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from unstable_core.envs.tasks import SOLO
from unstable_core.report.stats import Rate, TurnRates
from unstable_core.types import GameResult, PlannedGame, Step, Triple


@attrs.define
class PairStats(TurnRates):
    """The counts of one (model, opponent, env) triple, from the model's seat."""

    triple: Triple
    planned: int = 0
    games: int = 0  # finished (not failed)
    wins: int = 0
    draws: int = 0
    losses: int = 0
    seat0: int = 0  # finished games with the model at seat 0
    turns: int = 0  # every seat's turns, summed over finished games
    steps: int = 0  # the model's turns
    invalid: int = 0
    formatted: int = 0
    reward: float = 0.0  # the model's final rewards, summed over finished games
    tokens: int = 0  # the model's completion tokens, over the turns whose count is known
    token_turns: int = 0  # the model's turns with a known token count (none for random; an API's usage)
    errors: Counter = attrs.field(factory=Counter)

    @property
    def failed(self) -> int:
        return self.planned - self.games

    @property
    def win_rate(self) -> Rate:
        """W / n: a binomial proportion."""
        return Rate(self.wins, self.games)

    @property
    def score(self) -> Rate:
        """(W + D/2) / n; its Wilson interval treats half counts as counts (a conservative bound)."""
        return Rate(self.wins + self.draws / 2, self.games)

    @property
    def mean_reward(self) -> float | None:
        return self.reward / self.games if self.games else None

    @property
    def mean_turns(self) -> float | None:
        return self.turns / self.games if self.games else None

    @property
    def tokens_per_turn(self) -> float | None:
        return self.tokens / self.token_turns if self.token_turns else None

    def add(self, game: GameResult, model_seat: int) -> None:
        """Count one game played by this triple (failed games count only as failed, with their error)."""
        info = game.info
        if info.failed:
            self.errors[info.error or "unknown error"] += 1
            return
        mine = info.final_rewards[model_seat]
        theirs = info.final_rewards.get(1 - model_seat, 0.0)  # a task: +1 correct, -1 wrong, against 0
        self.games += 1
        self.wins += mine > theirs
        self.draws += mine == theirs
        self.losses += mine < theirs
        self.seat0 += model_seat == 0
        self.reward += mine
        self.turns += info.num_turns
        for traj in game.trajectories:
            if traj.pid == model_seat:
                for s in traj.steps:
                    self.steps += 1
                    self.invalid += s.invalid_move
                    self.formatted += s.format_ok
                    tokens = completion_tokens(s)
                    if tokens is not None:
                        self.tokens += tokens
                        self.token_turns += 1

    @property
    def task(self) -> bool:
        """Whether these are answers to a single-turn task (the win rate is the accuracy)."""
        return self.triple.opponent == SOLO

    def to_dict(self) -> dict[str, Any]:
        if self.task:
            return {
                "model": self.triple.model,
                "task": self.triple.env,
                "items": self.games,
                "failed": self.failed,
                "correct": self.wins,
                "accuracy": self.win_rate.to_dict(),
                "answered_rate": Rate(self.steps - self.invalid, self.steps).to_dict(),
                "boxed_rate": self.format_rate.to_dict(),
                "tokens_per_answer": self.tokens_per_turn,
                "errors": dict(self.errors.most_common(5)),
            }
        return {
            "model": self.triple.model,
            "opponent": self.triple.opponent,
            "env": self.triple.env,
            "games": self.games,
            "failed": self.failed,
            "wins": self.wins,
            "draws": self.draws,
            "losses": self.losses,
            "model_seat0_games": self.seat0,
            "win_rate": self.win_rate.to_dict(),
            "score": self.score.to_dict(),
            "mean_reward": self.mean_reward,
            "invalid_move_rate": self.invalid_rate.to_dict(),
            "format_rate": self.format_rate.to_dict(),
            "mean_turns": self.mean_turns,
            "tokens_per_turn": self.tokens_per_turn,
            "model_turns": self.steps,
            "errors": dict(self.errors.most_common(5)),
        }


def completion_tokens(step: Step) -> int | None:
    """A turn's completion tokens: its token ids, else the API's own count (`usage`), else None (`random`,
    or a server that reports no usage)."""
    if step.completion_ids:
        return len(step.completion_ids)
    return step.step_info.get("completion_tokens")  # the API backend checked it (`_usage_tokens`)


def aggregate(planned: list[PlannedGame], results: list[GameResult]) -> list[PairStats]:
    """Per triple, in the order first planned; a planned game without a result counts as failed."""
    by_idx = {r.info.game_idx: r for r in results}
    stats: dict[Triple, PairStats] = {}
    for game in planned:
        s = stats.setdefault(game.triple, PairStats(game.triple))
        s.planned += 1
        result = by_idx.get(game.spec.game_idx)
        if result is None:
            s.errors["no record of the game"] += 1
        else:
            s.add(result, game.model_seat)
    return list(stats.values())


COLUMNS = (
    "model",
    "opponent",
    "env",
    "games",
    "W/D/L",
    "win rate W/n [95% CI]",
    "score (W + D/2)/n [95% CI]",
    "invalid moves / turn",
    "format ok / turn",
    "turns / game",
    "tokens / turn",
)


def _rate(rate: Rate) -> str:
    if not rate.n:
        return "-"
    lo, hi = rate.interval
    return f"{rate.rate:.3f} [{lo:.3f}, {hi:.3f}]"


def _rate_n(rate: Rate) -> str:
    return f"{_rate(rate)} n={rate.n}" if rate.n else "-"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def rows(stats: list[PairStats]) -> list[list[str]]:
    """The table's cells, one row per triple."""
    return [
        [
            s.triple.model,
            s.triple.opponent,
            s.triple.env,
            f"{s.games}" + (f" ({s.failed} failed)" if s.failed else ""),
            f"{s.wins}/{s.draws}/{s.losses}",
            _rate(s.win_rate),
            _rate(s.score),
            _rate_n(s.invalid_rate),
            _rate_n(s.format_rate),
            _num(s.mean_turns),
            _num(s.tokens_per_turn),
        ]
        for s in stats
    ]


TASK_COLUMNS = (
    "model",
    "task",
    "items",
    "correct",
    "accuracy [95% CI]",
    "answered / item",
    "boxed / item",
    "tokens / answer",
)


def task_rows(stats: list[PairStats]) -> list[list[str]]:
    """The task table's cells, one row per (model, task)."""
    return [
        [
            s.triple.model,
            s.triple.env,
            f"{s.games}" + (f" ({s.failed} failed)" if s.failed else ""),
            f"{s.wins}/{s.games}",
            _rate(s.win_rate),
            _rate(Rate(s.steps - s.invalid, s.steps)),
            _rate(s.format_rate),
            _num(s.tokens_per_turn),
        ]
        for s in stats
    ]


def _tables(stats: list[PairStats]) -> list[tuple[tuple[str, ...], list[list[str]]]]:
    """(columns, rows) of the games' table and of the tasks' table, those that have rows."""
    games, tasks = [s for s in stats if not s.task], [s for s in stats if s.task]
    return [(c, r) for c, r in ((COLUMNS, rows(games)), (TASK_COLUMNS, task_rows(tasks))) if r]


def rich_table(stats: list[PairStats], title: str) -> Any:
    """The games' table and the tasks' table, one after the other, under `title`."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    tables = []
    for i, (columns, body) in enumerate(_tables(stats)):
        table = Table(title=title if i == 0 else None)
        for col in columns:
            table.add_column(col, overflow="fold")
        for row in body:
            table.add_row(*(Text(c) for c in row))
        tables.append(table)
    return Group(*tables)


def plain_table(stats: list[PairStats], title: str) -> str:
    """The same tables as aligned plain text (for a pipe, a log file, CI)."""
    lines = [title]
    for columns, body in _tables(stats):
        body = [list(columns), *body]
        widths = [max(len(r[i]) for r in body) for i in range(len(columns))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join(lines)


def failure_verdict(stats: list[PairStats], planned: int, out_dir: Any, allow_failures: bool) -> str | None:
    """Why an evaluation of `planned` games fails (exit status 1), naming the error: every game failed, or
    (without `allow_failures`) any did; None when it stands."""
    if not planned:
        return None
    if all(s.games == 0 for s in stats):
        errors = [e for s in stats for e in s.errors]
        return (
            f"every one of the {planned} games failed; the first error: {errors[0] if errors else 'unknown'} "
            f"(games in {out_dir})"
        )
    failed = sum(s.failed for s in stats)
    if not failed or allow_failures:
        return None
    top, count = Counter(e for s in stats for e in s.errors.elements()).most_common(1)[0]
    return (
        f"{failed} of the {planned} games failed, so the rates count only the finished ones; most common "
        f"error ({count}x): {top} (games in {out_dir}): fix the cause, or give --allow-failures to accept the "
        "results as they are"
    )
