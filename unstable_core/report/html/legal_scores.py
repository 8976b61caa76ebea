"""On request (`unstable report --score-legal N`): the model's probability of each legal answer at the turns
of the last N games whose legal moves are known, scored with the checkpoint that played each turn (the base
model for ckpt-0 and `base`, else the run's LoRA adapter of that step on it). The games do not record them
(the game loop records the legal answers; the learner scores them during its update), and scoring costs a
forward pass per turn, so the report does it only when asked and says what it cost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.report.checkpoint_rates import CKPT_PREFIX
from unstable_core.types import LEGAL


@attrs.define
class ScoreCost:
    """What scoring cost: turns scored, games, checkpoints, seconds in all and those loading the model."""

    turns: int = 0
    games: int = 0
    checkpoints: int = 0
    seconds: float = 0.0
    load_s: float = 0.0

    def line(self) -> str:
        scoring = self.seconds - self.load_s
        per = f"; {1000 * scoring / self.turns:.0f} ms per turn" if self.turns else ""
        return (
            f"scored the legal answers of {self.turns} turns in {self.games} games with {self.checkpoints} "
            f"checkpoint(s) in {self.seconds:.1f} s (loading the model {self.load_s:.1f} s{per})"
        )


def _version(uid: Any) -> int | None:
    """The step of the checkpoint that is `uid` (0 for the base model), None for another player."""
    uid = str(uid)
    if uid == "base":
        return 0
    tail = uid[len(CKPT_PREFIX) :]
    return int(tail) if uid.startswith(CKPT_PREFIX) and tail.isdigit() else None


def _turns(games: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The steps with legal answers (and their token ids) of `games`, by the checkpoint that played them."""
    out: dict[int, list[dict[str, Any]]] = {}
    for game in games:
        for traj in game.get("trajectories", []):
            for step in traj.get("steps", []):
                legal = (step.get("step_info") or {}).get(LEGAL)
                version = _version(step.get("model_uid", traj.get("model_uid")))
                if (
                    isinstance(legal, dict)
                    and legal.get("ids")
                    and step.get("prompt_ids")
                    and version is not None
                ):
                    out.setdefault(version, []).append(step)
    return out


def _adapter(run_dir: Path, version: int) -> str | None:
    if version == 0:
        return None
    folder = run_dir / "checkpoints" / f"step-{version}"
    if not (folder / "adapter_config.json").is_file():
        raise UnstableError(
            f"{folder} has no adapter: --score-legal scores each turn with the checkpoint that played it; "
            "score a run that still has its checkpoints"
        )
    return str(folder)


def score_legal(
    run_dir: Path, games: list[dict[str, Any]], model: str, device: str | None = None
) -> ScoreCost:
    """Set `probs` and `scored_by` on the legal record of every turn of `games` that has one (in memory:
    games.jsonl is not changed); return the cost."""
    import math

    from unstable_core.inference.hf.logprob_scorer import Scorer
    from unstable_core.probes.model_policy import load_model, with_adapter

    started = time.monotonic()
    by_version = _turns(games)
    cost = ScoreCost(games=len(games), checkpoints=len(by_version))
    if not by_version:
        return cost
    net, tokenizer = load_model(model, device)
    cost.load_s = time.monotonic() - started
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    wrapped = None
    for version, steps in sorted(by_version.items()):
        adapter = _adapter(run_dir, version)
        if adapter is not None:  # peft changes the layers in place: the base model (0) is scored first
            wrapped = with_adapter(net if wrapped is None else wrapped, adapter, f"report-{version}")
        scorer = Scorer(wrapped if adapter is not None else net, pad_id=int(pad or 0))
        legal = [s["step_info"][LEGAL] for s in steps]
        scores = scorer.logprobs([s["prompt_ids"] for s in steps], [rec["ids"] for rec in legal])
        for rec, logps in zip(legal, scores, strict=True):
            rec["probs"] = [math.exp(x) for x in logps]
            rec["scored_by"] = f"ckpt-{version}" if version else "the base model"
        cost.turns += len(steps)
    cost.seconds = time.monotonic() - started
    return cost
