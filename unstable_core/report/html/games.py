"""The game browser's data: a row per game to filter on (checkpoint, opponent, env, outcome), and each game's
turns (observation, answer, rewards, sampled log-prob, legal answers) in gzip-compressed chunks that the
page opens only when a game of the chunk is shown: prompts repeat, so thousands of games stay small."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

from unstable_core.report.checkpoint_rates import CKPT_PREFIX
from unstable_core.types import LEGAL

CHUNK_GAMES = 100  # games per compressed chunk: one chunk is inflated to replay one of its games
INDEX_FIELDS = ("n", "game", "env", "checkpoint", "opponent", "outcome", "turns", "kind")
NOT_RECORDED = (
    "not recorded: the game loop records the legal answers, not the model's probability of each "
    "(the learner scores them during its update)"
)


def _seat(game: dict[str, Any]) -> tuple[int | None, str]:
    """The seat whose view the browser takes (the first collected one, else a checkpoint's, else seat 0),
    and its model."""
    models = {int(pid): uid for pid, uid in game["info"].get("models", {}).items()}
    collected = [t["pid"] for t in game.get("trajectories", []) if t.get("collect_data")]
    ckpts = [pid for pid, uid in sorted(models.items()) if str(uid).startswith(CKPT_PREFIX)]
    pid = next(iter(collected or ckpts or sorted(models)), None)
    return pid, str(models.get(pid, "-"))


def _outcome(game: dict[str, Any], pid: int | None) -> str:
    """win, loss or draw of seat `pid` (correct or wrong on a one-seat task); failed for a failed game."""
    info = game["info"]
    if info.get("failed"):
        return "failed"
    rewards = {int(k): float(v) for k, v in (info.get("final_rewards") or {}).items()}
    if pid not in rewards:
        return "unknown"
    if len(rewards) == 1:
        return "correct" if rewards[pid] > 0 else "wrong"
    theirs = max(r for p, r in rewards.items() if p != pid)
    return "win" if rewards[pid] > theirs else "loss" if rewards[pid] < theirs else "draw"


def index_row(n: int, game: dict[str, Any]) -> list[Any]:
    """The game's row of the browser's table, in `INDEX_FIELDS` order."""
    info = game["info"]
    pid, model = _seat(game)
    others = sorted({str(uid) for p, uid in info.get("models", {}).items() if int(p) != pid})
    opponent = "self" if others == [model] else ", ".join(others) or "none (task)"
    turns = sum(len(t.get("steps", [])) for t in game.get("trajectories", []))
    kind = "eval" if info.get("eval") else "train"
    return [
        n,
        info.get("game_idx", n),
        info.get("env_id", "-"),
        model,
        opponent,
        _outcome(game, pid),
        turns,
        kind,
    ]


def _legal(step: dict[str, Any]) -> dict[str, Any] | None:
    """The turn's legal answers, and their probabilities where recorded (`probs` or `logprobs`)."""
    legal = (step.get("step_info") or {}).get(LEGAL)
    if not isinstance(legal, dict) or not legal.get("moves"):
        return None
    out = {"moves": [str(m) for m in legal["moves"]], "played": legal.get("played", -1), "probs": None}
    out["source"] = (
        f"scored by {legal['scored_by']} (unstable report --score-legal)"
        if legal.get("scored_by")
        else "recorded"
    )
    if isinstance(legal.get("probs"), list):
        out["probs"] = legal["probs"]
    elif isinstance(legal.get("logprobs"), list):
        import math

        out["probs"] = [math.exp(x) for x in legal["logprobs"]]
    return out


def _turn(step: dict[str, Any]) -> dict[str, Any]:
    """One turn as the replay shows it (text stays text: the page sets it with textContent)."""
    logprobs = [x for x in step.get("logprobs") or [] if isinstance(x, (int, float))]
    info = step.get("step_info") or {}
    return {
        "pid": step.get("pid"),
        "turn": step.get("turn"),
        "model": step.get("model_uid"),
        "version": step.get("policy_version"),
        "obs": step.get("obs", ""),
        "answer": step.get("action", step.get("act", "")),
        "reward": step.get("reward"),
        "final_reward": step.get("final_reward"),
        "shaping": step.get("shaping"),
        "advantage": step.get("advantage"),
        "logprob": sum(logprobs) if logprobs else None,
        "tokens": len(step.get("completion_ids") or logprobs),
        "invalid": step.get("invalid_move"),
        "format_ok": step.get("format_ok"),
        "finish": info.get("finish_reason"),
        "legal": _legal(step),
    }


def game_detail(game: dict[str, Any]) -> dict[str, Any]:
    """What the replay shows of a game: its seats, outcome, reason, and every turn in play order."""
    info = game["info"]
    steps = [s for t in game.get("trajectories", []) for s in t.get("steps", [])]
    steps.sort(key=lambda s: s.get("turn") if isinstance(s.get("turn"), int) else 0)
    return {
        "models": info.get("models", {}),
        "final_rewards": info.get("final_rewards", {}),
        "reason": info.get("reason"),
        "error": info.get("error"),
        "seed": info.get("seed"),
        "turns": [_turn(s) for s in steps],
    }


def _pack(details: list[dict[str, Any]]) -> str:
    """A chunk of games as base64 of gzip of JSON (base64 holds no character HTML could read as markup)."""
    raw = json.dumps(details, separators=(",", ":"), allow_nan=False, default=str).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


def browser_data(games: list[dict[str, Any]], chunk: int = CHUNK_GAMES) -> dict[str, Any]:
    """The browser's index (a row per game) and its compressed chunks (game n in chunk n // `chunk`)."""
    from unstable_core.io import finite_json

    games, _ = finite_json(games)  # a NaN reward would not be JSON
    rows = [index_row(n, g) for n, g in enumerate(games)]
    chunks = [_pack([game_detail(g) for g in games[i : i + chunk]]) for i in range(0, len(games), chunk)]
    return {
        "fields": list(INDEX_FIELDS),
        "rows": rows,
        "chunk": chunk,
        "chunks": chunks,
        "legal_note": NOT_RECORDED,
    }
