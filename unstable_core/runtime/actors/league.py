"""The league as the run's single source of truth, saved to its file (`league_path`): at once when a model
is added, at most every `save_every_s` seconds for rating updates (one rewrite per game would make a
thousand short games a thousand file writes), and on `flush()`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from unstable_core.league.league import League
from unstable_core.runtime.actors.request_batching import answer_each


class LeagueActor:
    """Wraps a `League` (hosted in a Ray actor) and writes it atomically."""

    def __init__(
        self,
        path: str | Path,
        save_every_s: float = 2.0,
        state: dict[str, Any] | None = None,
        fresh: bool = False,
        **league_kwargs: Any,
    ) -> None:
        """`state` (a resumed run's league as saved with its checkpoint) wins over the file; `fresh`
        ignores the file (a run resumed before its first checkpoint starts over)."""
        self.path = Path(path)
        self.save_every_s = save_every_s
        self._saved_at = 0.0
        self._dirty = False
        if state is not None:
            self.league = League.from_dict(state)
            self._dirty = True
        elif self.path.exists() and not fresh:
            self.league = League.load(self.path)
        else:
            self.league = League(**league_kwargs)

    def _save(self) -> None:
        self.league.save(self.path)
        self._saved_at, self._dirty = time.monotonic(), False

    def flush(self) -> None:
        """Write what changed since the last save."""
        if self._dirty:
            self._save()

    def add_checkpoint(self, uid: str, path: str | None, iteration: int, inherit: bool = True) -> None:
        self.league.add_checkpoint(uid, path, iteration, inherit=inherit)
        self._save()

    def add_fixed(self, name: str, prior_mu: float = 25.0) -> None:
        self.league.add_fixed(name, prior_mu=prior_mu)
        self._save()

    def update_ratings(self, uids: list[str], scores: list[float], env_id: str) -> None:
        self.league.update_ratings(uids, scores, env_id)
        self._dirty = True
        if time.monotonic() - self._saved_at >= self.save_every_s:
            self._save()

    def update_ratings_many(self, games: list[tuple[list[str], list[float], str]]) -> list[Any]:
        """`update_ratings` for many games (uids, scores, env_id) in order; per game, None or its exception."""
        return answer_each(lambda game: self.update_ratings(*game), games)

    def get_current_ckpt(self) -> str | None:
        return self.league.get_current_ckpt()

    def to_dict(self) -> dict[str, Any]:
        return self.league.to_dict()
