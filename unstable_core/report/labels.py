"""Short names for what a person reads on the terminal: `train invalid 0.62`, not
`train/TicTacToe-v0-train/invalid_move_rate` (the files keep the full keys)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# the tracker's moving means (`kind/env/metric`) a person reads, in the order they are shown
MEAN_LABELS = {
    "invalid_move_rate": "invalid",
    "format_rate": "format",
    "win_rate": "win",
    "score": "score",
    "game_length": "turns",
}
KINDS = ("train", "eval")
# under a TrueSkill table whose games count games of a model against itself
SELF_PLAY_CAPTION = "games = W + D + L + self: games against itself (in games, rating nobody)"


def short_env(env_id: str) -> str:
    """`TicTacToe-v0-train` -> `TicTacToe`, `2048-v0-easy-train` -> `2048-easy`: the id without its version
    and without the `-train` of the training variant."""
    if env_id.endswith(".jsonl"):  # a task file: its name
        return env_id.replace("\\", "/").rsplit("/", 1)[-1][: -len(".jsonl")] or env_id
    return re.sub(r"-train$", "", re.sub(r"-v\d+", "", env_id)) or env_id


def short_env_names(env_ids: Iterable[str]) -> dict[str, str]:
    """The short name of each env id; ids whose short names would be the same keep their full id."""
    ids = sorted(set(env_ids))
    shorts = [short_env(i) for i in ids]
    return {i: s if shorts.count(s) == 1 else i for i, s in zip(ids, shorts, strict=True)}


def mean_labels(keys: Iterable[str], metrics: Iterable[str] = tuple(MEAN_LABELS)) -> list[tuple[str, str]]:
    """(key, label) for the tracker's means `kind/env/metric` among `metrics`: `train invalid`, or
    `train TicTacToe invalid` when the keys hold several envs; training first, then evaluation, each env
    in name order, metrics in MEAN_LABELS' order."""
    wanted = list(metrics)
    parsed = []
    for key in keys:
        kind, _, rest = key.partition("/")
        env, _, metric = rest.rpartition("/")
        if env and metric in wanted:
            parsed.append((key, kind, env, metric))
    names = short_env_names(env for _, _, env, _ in parsed)
    several = len(names) > 1
    order = {k: i for i, k in enumerate(KINDS)}
    parsed.sort(key=lambda p: (order.get(p[1], len(KINDS)), p[1], p[2], wanted.index(p[3])))
    return [
        (key, " ".join([kind, *([names[env]] if several else []), MEAN_LABELS[metric]]))
        for key, kind, env, metric in parsed
    ]


def results_text(games: int, wins: int, draws: int, losses: int) -> str:
    """A model's W/D/L as the TrueSkill tables show it: `6/0/0 + 9 self` when `games` also counts games
    against itself (mirror self-play rates nobody, so W/D/L leave them out); else `6/0/0`."""
    mirror = games - wins - draws - losses
    return f"{wins}/{draws}/{losses}" + (f" + {mirror} self" if mirror else "")
