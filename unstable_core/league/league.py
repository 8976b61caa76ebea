"""The league: every learner checkpoint and fixed opponent, with TrueSkill ratings and match counts.

Pure Python (a Ray actor wraps it in the runtime): methods take and return plain values and attrs objects.
Ratings use a private `trueskill.TrueSkill` environment, never the package's global one.

Rules that differ from UnstableBaselines v0.2:
- a new checkpoint inherits the current one's mu and twice its sigma, capped at the prior sigma;
- a game where every seat is the same model (mirror self-play) leaves ratings unchanged;
- a model holding several seats beside other models is rated once, on its mean score.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trueskill

from unstable_core.errors import ConfigError, UnstableError
from unstable_core.io import atomic_write_text, dumps_json
from unstable_core.types import ModelMeta

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
LEAGUE_FILE = "league.json"  # in the run directory
_OLD_LEAGUE_FILE = "registry.json"  # its name until run directories were written with LEAGUE_FILE


def league_path(run_dir: str | os.PathLike[str]) -> Path:
    """The file of a run directory's league: `league.json`, or `registry.json` in a run directory written
    before the file was renamed (this is the one place that knows the old name). A new run's is
    `league.json`; a resumed old run goes on with its `registry.json`, so a run never holds two leagues."""
    run_dir = Path(run_dir)
    path, old = run_dir / LEAGUE_FILE, run_dir / _OLD_LEAGUE_FILE
    return old if old.is_file() and not path.exists() else path


def _pair(uid_a: str, uid_b: str) -> tuple[str, str]:
    """The key of an unordered pair of models in the match counts."""
    return (uid_a, uid_b) if uid_a <= uid_b else (uid_b, uid_a)


class League:
    """Checkpoints and fixed opponents with their TrueSkill ratings, results and pairwise match counts."""

    def __init__(
        self,
        beta: float = 4.0,
        mu: float = 25.0,
        sigma: float = 25.0 / 3,
        tau: float | None = None,
        draw_probability: float = 0.1,
    ) -> None:
        tau = sigma / 100 if tau is None else tau
        for name, value in (("mu", mu), ("sigma", sigma), ("beta", beta), ("tau", tau)):
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"league: {name} must be a finite number, got {value!r}")
        if sigma <= 0 or beta <= 0 or tau < 0:
            raise ConfigError(
                f"league: need sigma > 0, beta > 0 and tau >= 0, got sigma={sigma}, beta={beta}, tau={tau}"
            )
        if not 0.0 <= draw_probability < 1.0:
            raise ConfigError(f"league: draw_probability must be in [0, 1), got {draw_probability}")
        self.mu, self.sigma, self.beta, self.tau = float(mu), float(sigma), float(beta), float(tau)
        self.draw_probability = float(draw_probability)
        self.env = trueskill.TrueSkill(
            mu=self.mu, sigma=self.sigma, beta=self.beta, tau=self.tau, draw_probability=self.draw_probability
        )
        self._models: dict[str, ModelMeta] = {}
        self._current: str | None = None
        self._match_counts: dict[tuple[str, str], int] = {}
        self._env_games: dict[str, int] = {}

    # ---- adding models -------------------------------------------------------------------------

    def add_checkpoint(self, uid: str, path: str | None, iteration: int, inherit: bool = True) -> None:
        """Register a learner checkpoint and make it the current one.

        With `inherit`, it starts from the current checkpoint's mu and min(2 sigma, prior sigma):
        close to its parent, but uncertain enough to move quickly.
        """
        self._check_new_uid(uid)
        if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
            raise UnstableError(f"checkpoint {uid!r}: iteration must be an integer >= 0, got {iteration!r}")
        mu, sigma = self.mu, self.sigma
        if inherit and self._current is not None:
            parent = self._models[self._current]
            mu, sigma = parent.mu, min(2.0 * parent.sigma, self.sigma)
        self._models[uid] = ModelMeta(
            uid=uid, kind="checkpoint", path_or_name=path, iteration=iteration, mu=mu, sigma=sigma
        )
        self._current = uid

    def add_fixed(self, name: str, prior_mu: float = 25.0, active: bool = True) -> None:
        """Register a fixed opponent (uid = path_or_name = `name`); adding an existing one does nothing.

        `active=False` marks a rating anchor that samplers never pick as an opponent (the dummy).
        """
        existing = self._models.get(name)
        if existing is not None and existing.kind == "fixed":
            return
        self._check_new_uid(name)
        if not isinstance(prior_mu, (int, float)) or not math.isfinite(prior_mu):
            raise UnstableError(
                f"fixed opponent {name!r}: prior_mu must be a finite number, got {prior_mu!r}"
            )
        self._models[name] = ModelMeta(
            uid=name, kind="fixed", path_or_name=name, mu=float(prior_mu), sigma=self.sigma, active=active
        )

    def _check_new_uid(self, uid: str) -> None:
        if not isinstance(uid, str) or not uid:
            raise UnstableError(f"a model uid must be a non-empty string, got {uid!r}")
        if uid in self._models:
            raise UnstableError(
                f"model uid {uid!r} is already registered (as a {self._models[uid].kind}); give the new model another uid"
            )

    # ---- ratings -------------------------------------------------------------------------------

    @staticmethod
    def _scores_to_ranks(scores: Sequence[float]) -> list[int]:
        """Competition ranks: 0 is best, higher score = lower rank, ties share a rank ([3, 1, 3] -> [0, 2, 0])."""
        return [sum(other > s for other in scores) for s in scores]

    def update_ratings(
        self, uids: Sequence[str], scores: Sequence[float], env_id: str, dummy_uid: str = "fixed-env"
    ) -> dict[str, ModelMeta]:
        """Rate one finished game from the seats' model uids and scores; returns the participants' new metas.

        One seat: rated against `dummy_uid` (an inactive fixed model, added on demand) that scored 0.
        Every seat the same model: a mirror game, counted but not rated.
        """
        self._check_game(uids, scores, env_id)
        mean_scores = self._mean_by_uid(uids, scores)
        self._env_games[env_id] = self._env_games.get(env_id, 0) + 1
        if len(mean_scores) == 1 and len(uids) > 1:  # mirror self-play: no information on the rating
            (uid,) = mean_scores
            self._models[uid].games += 1
            self._match_counts[_pair(uid, uid)] = self._match_counts.get(_pair(uid, uid), 0) + 1
            return {uid: copy.deepcopy(self._models[uid])}
        if len(mean_scores) == 1:
            if dummy_uid in mean_scores:
                raise UnstableError(
                    f"the dummy opponent {dummy_uid!r} cannot play a game; pass another dummy_uid"
                )
            self.add_fixed(dummy_uid, prior_mu=self.mu, active=False)
            mean_scores[dummy_uid] = 0.0
        players = list(mean_scores)
        ranks = self._scores_to_ranks([mean_scores[u] for u in players])
        self._rate(players, ranks, env_id)
        self._count_results(players, ranks)
        for i, a in enumerate(players):
            for b in players[i + 1 :]:
                self._match_counts[_pair(a, b)] = self._match_counts.get(_pair(a, b), 0) + 1
        return {u: copy.deepcopy(self._models[u]) for u in players}

    def _check_game(self, uids: Sequence[str], scores: Sequence[float], env_id: str) -> None:
        if not uids or len(uids) != len(scores):
            raise UnstableError(
                f"update_ratings needs one score per seat, got {len(uids)} uids and {len(scores)} scores"
            )
        if not isinstance(env_id, str) or not env_id:
            raise UnstableError(f"update_ratings: env_id must be a non-empty string, got {env_id!r}")
        for uid in uids:
            self._require(uid)
        for s in scores:
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
                raise UnstableError(f"update_ratings: scores must be finite numbers, got {list(scores)!r}")

    @staticmethod
    def _mean_by_uid(uids: Sequence[str], scores: Sequence[float]) -> dict[str, float]:
        """Each distinct uid once (in seat order) with the mean score of its seats."""
        seats: dict[str, list[float]] = {}
        for uid, s in zip(uids, scores, strict=True):
            seats.setdefault(uid, []).append(float(s))
        return {uid: sum(v) / len(v) for uid, v in seats.items()}

    def _rate(self, players: list[str], ranks: list[int], env_id: str) -> None:
        groups = [(self.env.create_rating(self._models[u].mu, self._models[u].sigma),) for u in players]
        try:
            rated = self.env.rate(groups, ranks=ranks)
        except FloatingPointError:  # trueskill's float backend fails on extreme upsets; keep the old ratings
            logger.warning(
                "TrueSkill could not rate a game of %s on %s (extreme upset); ratings kept", players, env_id
            )
            return
        for uid, (rating,) in zip(players, rated, strict=True):
            self._models[uid].mu, self._models[uid].sigma = float(rating.mu), float(rating.sigma)

    def _count_results(self, players: list[str], ranks: list[int]) -> None:
        """Win: alone at the top; draw: sharing the top; loss: below it."""
        for uid, rank in zip(players, ranks, strict=True):
            meta = self._models[uid]
            meta.games += 1
            if rank > 0:
                meta.losses += 1
            elif ranks.count(0) > 1:
                meta.draws += 1
            else:
                meta.wins += 1

    # ---- queries -------------------------------------------------------------------------------

    def _require(self, uid: str) -> ModelMeta:
        meta = self._models.get(uid) if isinstance(uid, str) else None
        if meta is None:
            known = ", ".join(self._models) or "none"
            raise UnstableError(f"unknown model uid {uid!r}; the league knows: {known}")
        return meta

    def get_model(self, uid: str) -> ModelMeta:
        """A copy of one model's metadata and rating."""
        return copy.deepcopy(self._require(uid))

    def find(self, uid: str) -> ModelMeta | None:
        """One model's metadata itself, for reading (no copy: a game's routing looks it up every seat), or
        None when `uid` is unknown."""
        return self._models.get(uid)

    def get_all_models(self) -> dict[str, ModelMeta]:
        """A deep copy of every model, by uid, in the order they were added."""
        return copy.deepcopy(self._models)

    def get_current_ckpt(self) -> str | None:
        """The uid of the newest learner checkpoint, or None before the first one."""
        return self._current

    def learner_step(self) -> int:
        """The learner's step: the update its current checkpoint was saved after (0 for the base model and
        before the first checkpoint). What a sampler reads to change its draws as the run goes on."""
        return self._models[self._current].iteration if self._current is not None else 0

    def get_name_or_lora_path(self, uid: str) -> str | None:
        """Where the model lives: a LoRA adapter path, a model name, or None for the base model."""
        return self._require(uid).path_or_name

    def checkpoint_uids(self) -> list[str]:
        """The uids of all learner checkpoints, oldest iteration first."""
        ckpts = [m for m in self._models.values() if m.kind == "checkpoint"]
        return [m.uid for m in sorted(ckpts, key=lambda m: m.iteration)]

    def quality(self, uid_a: str, uid_b: str) -> float:
        """TrueSkill's match quality of a 1v1 game (the draw probability of two such ratings), in (0, 1]."""
        a, b = self._require(uid_a), self._require(uid_b)
        rating_a, rating_b = self.env.create_rating(a.mu, a.sigma), self.env.create_rating(b.mu, b.sigma)
        return float(trueskill.quality_1vs1(rating_a, rating_b, env=self.env))

    def get_match_counts(self) -> dict[tuple[str, str], int]:
        """Games per unordered pair of models (key sorted; `(uid, uid)` counts mirror games)."""
        return dict(self._match_counts)

    def get_env_games(self) -> dict[str, int]:
        """Rated or counted games per environment id."""
        return dict(self._env_games)

    # ---- persistence ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the whole league."""
        return {
            "format_version": FORMAT_VERSION,
            "config": {
                "mu": self.mu,
                "sigma": self.sigma,
                "beta": self.beta,
                "tau": self.tau,
                "draw_probability": self.draw_probability,
            },
            "current": self._current,
            "models": [attrs.asdict(m) for m in self._models.values()],
            "match_counts": [[a, b, n] for (a, b), n in sorted(self._match_counts.items())],
            "env_games": dict(self._env_games),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> League:
        """Rebuild a league from `to_dict` output."""
        try:
            if data.get("format_version") != FORMAT_VERSION:
                raise UnstableError(
                    f"league format_version {data.get('format_version')!r} is not {FORMAT_VERSION}; "
                    "it was written by another version of unstable"
                )
            league = cls(**data["config"])
            for m in data["models"]:
                league._models[m["uid"]] = ModelMeta(**m)
            current = data["current"]
            if current is not None and current not in league._models:
                raise UnstableError(f"league: current checkpoint {current!r} is not among its models")
            league._current = current
            league._match_counts = {_pair(a, b): int(n) for a, b, n in data["match_counts"]}
            league._env_games = {str(k): int(v) for k, v in data.get("env_games", {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UnstableError(f"not a league snapshot ({type(exc).__name__}: {exc})") from exc
        return league

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the league as JSON, atomically (temporary file in the same folder, then rename)."""
        atomic_write_text(path, dumps_json(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> League:
        """Read a league written by `save`."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UnstableError(
                f"league file {str(path)!r} does not exist; check the run directory"
            ) from None
        except json.JSONDecodeError as exc:
            raise UnstableError(f"league file {str(path)!r} is not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise UnstableError(f"league file {str(path)!r} does not hold a JSON object")
        return cls.from_dict(data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, League) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"League({len(self._models)} models, current={self._current!r})"
