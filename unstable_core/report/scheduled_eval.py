"""The rates of scheduled evaluations (`runtime.actors.scheduled_eval` plays them): per (env, opponent) of a
checkpoint's games, W/D/L and win rate, score, invalid-move and format rates with Wilson intervals, as
metrics.jsonl holds them (`{"step": K, "eval/<env>/vs_<opp>/win_rate": ...}`); and those metrics drawn as
curves, progress lines and a table."""

from __future__ import annotations

from typing import Any

from unstable_core.envs.tasks import SOLO
from unstable_core.report.labels import short_env_names
from unstable_core.report.stats import Rate
from unstable_core.types import GameResult


def pair_key(env_id: str, opponent: str) -> str:
    return f"eval/{env_id}/vs_{opponent}"


def summarise(uid: str, results: list[GameResult]) -> dict[str, float]:
    """Per (env, opponent) of checkpoint `uid`'s games (a task's opponent is `none`, its wins the correct
    answers): W/D/L, games, failed games; `win_rate` = W / n and
    `score` = (W + D/2) / n, each with its Wilson interval (`_lo`, `_hi`; for the score, with its half
    counts, a conservative bound); `mean_reward` (mean final reward); invalid-move and format rates per
    step with intervals."""
    groups: dict[str, list[GameResult]] = {}
    for r in results:
        opponents = {m for m in r.info.models.values() if m != uid}
        label = ",".join(sorted(opponents)) if len(r.info.models) > 1 else SOLO
        groups.setdefault(pair_key(r.info.env_id, label), []).append(r)
    out: dict[str, float] = {}
    for key, games in sorted(groups.items()):
        finished = [g for g in games if not g.info.failed]
        wins = draws = losses = steps = invalid = formatted = 0
        reward = 0.0
        for g in finished:
            mine_pids = [p for p, m in g.info.models.items() if m == uid]
            mine = max(g.info.final_rewards[p] for p in mine_pids)
            # a task (one seat) is won by a correct answer (+1), lost by a wrong one (-1)
            theirs = max((r for p, r in g.info.final_rewards.items() if p not in mine_pids), default=0.0)
            wins, draws, losses = wins + (mine > theirs), draws + (mine == theirs), losses + (mine < theirs)
            reward += sum(g.info.final_rewards[p] for p in mine_pids) / len(mine_pids)
            for s in (s for t in g.trajectories if t.model_uid == uid for s in t.steps):
                steps, invalid, formatted = steps + 1, invalid + s.invalid_move, formatted + s.format_ok
        out.update(
            {
                f"{key}/games": float(len(finished)),
                f"{key}/failed": float(len(games) - len(finished)),
                f"{key}/wins": float(wins),
                f"{key}/draws": float(draws),
                f"{key}/losses": float(losses),
                f"{key}/steps": float(steps),
            }
        )
        if finished:
            out[f"{key}/mean_reward"] = reward / len(finished)
        for name, rate in (
            ("win_rate", Rate(wins, len(finished))),
            ("score", Rate(wins + draws / 2, len(finished))),
            ("invalid_move_rate", Rate(invalid, steps)),
            ("format_rate", Rate(formatted, steps)),
        ):
            if rate.n:  # no rate of nothing: JSON never holds a NaN
                lo, hi = rate.interval
                out.update({f"{key}/{name}": rate.rate, f"{key}/{name}_lo": lo, f"{key}/{name}_hi": hi})
    return out


def eval_panels(
    records: list[dict[str, Any]],
) -> list[tuple[str, list[int], list[float], list[float], list[float]]]:
    """(label, checkpoints, win rates, lower, upper) per (env, opponent) of the scheduled evaluations in
    metrics.jsonl records."""
    series: dict[str, list[tuple[int, float, float, float]]] = {}
    for r in records:
        for k, v in r.items():
            if k.startswith("eval/") and k.endswith("/win_rate"):
                key = k[: -len("/win_rate")]
                series.setdefault(key, []).append(
                    (r["step"], v, r[f"{key}/win_rate_lo"], r[f"{key}/win_rate_hi"])
                )
    panels = []
    for key, pts in sorted(series.items()):
        pts.sort()
        env, opp = key[len("eval/") :].rsplit("/vs_", 1)
        n = max(int(r.get(f"{key}/games", 0)) for r in records if f"{key}/games" in r)
        label = (
            f"accuracy (correct/n)\n{env}\n(eval, {n} items)"
            if opp == SOLO
            else f"win rate (W/n) vs {opp}\n{env}\n(eval, {n} games)"
        )
        panels.append(
            (
                label,
                [p[0] for p in pts],
                [p[1] for p in pts],
                [p[2] for p in pts],
                [p[3] for p in pts],
            )
        )
    return panels


def _pairs(metrics: dict[str, float]) -> list[str]:
    return sorted({k.rsplit("/", 1)[0] for k in metrics if k.endswith("/games")})


def pair_names(keys: list[str]) -> dict[str, tuple[str | None, str]]:
    """`eval/<env>/vs_<opponent>` -> (env's short name, or None when the keys hold one env only; opponent)."""
    split = {key: key[len("eval/") :].rsplit("/vs_", 1) for key in keys}
    names = short_env_names(env for env, _ in split.values())
    return {key: (names[env] if len(names) > 1 else None, opp) for key, (env, opp) in split.items()}


def _win_text(metrics: dict[str, float], key: str, digits: int = 3, wdl_label: str = "") -> str:
    """Win rate W/n with its 95% interval and W/D/L: `0.750 [0.301, 0.954] 3/0/1`; `wdl_label` goes
    before the W/D/L counts."""
    if f"{key}/win_rate" not in metrics:
        return f"no finished game ({int(metrics[f'{key}/failed'])} failed)"
    wdl = "/".join(str(int(metrics[f"{key}/{x}"])) for x in ("wins", "draws", "losses"))
    rate, lo, hi = (metrics[f"{key}/win_rate{x}"] for x in ("", "_lo", "_hi"))
    return f"{rate:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}] {wdl_label}{wdl}"


def last_eval_lines(evals: dict[int, dict[str, float]]) -> list[tuple[str, str]]:
    """(label, win rate text) per (env, opponent) of the latest scheduled evaluation, for progress displays:
    (`eval ckpt-4 vs base`, `win 0.75 [0.30, 0.95] W/D/L 3/0/1`)."""
    if not evals:
        return []
    version = max(evals)
    metrics = evals[version]
    lines = []
    for key, (env, opp) in pair_names(_pairs(metrics)).items():
        solo = opp == SOLO
        what = (
            [env or key[len("eval/") :].rsplit("/vs_", 1)[0]]
            if solo
            else [*([env] if env else []), "vs", opp]
        )
        rate = ("accuracy " if solo else "win ") if f"{key}/win_rate" in metrics else ""
        lines.append(
            (
                " ".join(["eval", f"ckpt-{version}", *what]),
                rate + _win_text(metrics, key, 2, "correct/-/wrong " if solo else "W/D/L "),
            )
        )
    return lines


def evals_table(evals: dict[int, dict[str, float]]) -> Any:
    """Every scheduled evaluation of a run as a rich table (a row per checkpoint and env/opponent); long
    names fold rather than end in an ellipsis."""
    from rich.table import Table

    table = Table(title="Scheduled evaluation (95% Wilson intervals; win rate = W/n, score = (W + D/2)/n)")
    names = pair_names(sorted({key for m in evals.values() for key in _pairs(m)}))
    several = any(env for env, _ in names.values())
    columns = ("ckpt", "env vs opponent" if several else "opponent", "win rate [95%] W/D/L", "score [95%]")
    for col in (*columns, "invalid per turn", "format per turn", "mean reward"):
        table.add_column(col, overflow="fold")
    for version in sorted(evals):
        m = evals[version]
        for key in _pairs(m):
            rates = []
            for name in ("score", "invalid_move_rate", "format_rate"):
                rates.append(
                    f"{m[f'{key}/{name}']:.3f} [{m[f'{key}/{name}_lo']:.3f}, {m[f'{key}/{name}_hi']:.3f}]"
                    if f"{key}/{name}_lo" in m
                    else "-"
                )
            reward = f"{m[f'{key}/mean_reward']:.3f}" if f"{key}/mean_reward" in m else "-"
            env, opp = names[key]
            table.add_row(
                f"ckpt-{version}", f"{env} vs {opp}" if env else opp, _win_text(m, key), *rates, reward
            )
    return table
