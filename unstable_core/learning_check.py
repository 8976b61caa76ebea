"""The learning test every learner must pass: a tiny game that any correct learner masters in a few updates.

The game, "guess the letter", has one player and one turn: the prompt names the winning letter among
A-H; answering it wins (+1), anything else loses (-1). The model is a tiny random-weight Llama whose LM head
puts almost all of its mass evenly on the eight letters, so the untrained policy wins about 1/8 of the time
and only learning (through the learner's LoRA adapter: the head itself is frozen) can move it to the
winning letter. Everything between is the real thing: the transformers backend sampling with the latest
adapter, the game loop, the buffer with the registered reward transforms, the learner's update and its
checkpoints. A learner passes when its success rate goes from <= 0.3 to >= 0.9 within `max_updates`.

    from unstable_core.learning_check import check_learner_learns
    result = check_learner_learns(MyLearner, tmp_path)
    assert result.passed, result.summary()
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import attrs

from unstable_core.types import GameSpec, PlayerSpec

LETTERS = "ABCDEFGH"
WINNING = "C"
ENV_ID = "GuessTheLetter-v0"
START_MAX, GOAL = 0.3, 0.9


class GuessTheLetterEnv:
    """One player, one turn, the TextArena protocol of `play_game`: answer the letter the prompt names."""

    def __init__(self, winning: str = WINNING) -> None:
        self.winning = winning
        self.action: str | None = None

    def reset(self, num_players: int, seed: int | None = None) -> None:
        self.action = None

    def get_observation(self) -> tuple[int, str]:
        letters = ", ".join(LETTERS)
        return 0, f"Letters: {letters}. The winning letter is {self.winning}. Answer with one letter."

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        self.action = action
        return True, {}

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, str]]]:
        won = (self.action or "").strip("[] \n") == self.winning
        return {0: 1.0 if won else -1.0}, {0: {"reason": "right letter" if won else "wrong letter"}}


def make_letter_model(folder: str | os.PathLike, hidden_size: int = 32, seed: int = 0) -> str:
    """A tiny Llama (SmolLM2's tokenizer) whose LM head favours the letters A-H equally: the residual stream
    carries a large constant in dimension 0, which each letter's head row reads (logit ~ +14, the rest of
    the vocabulary ~ 0), and each letter also reads one dimension of its own, which LoRA can learn to raise."""
    import torch

    from unstable_core.models import DEFAULT_MODEL, load_tokenizer
    from unstable_core.testing import tiny_llama

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(DEFAULT_MODEL)
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    model = tiny_llama(tok, hidden_size, tie_word_embeddings=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = 10.0  # dominates the RMS norm: h[0] ~ sqrt(H)
        head = model.get_output_embeddings().weight
        head.normal_(0.0, 0.02)
        for k, letter in enumerate(LETTERS):
            (token,) = tok.encode(letter, add_special_tokens=False)
            head[token] = 0.0
            head[token, 0] = 14.0 / hidden_size**0.5
            head[token, 1 + k] = 4.0
    model.save_pretrained(folder, safe_serialization=True)
    return str(folder)


@attrs.define
class LearningResult:
    """Success rate of the games played by each policy version (version 0 = before any update)."""

    learner: str
    rates: list[float] = attrs.field(factory=list)
    games: list[int] = attrs.field(factory=list)
    seconds: float = 0.0

    @property
    def start(self) -> float:
        return self.rates[0]

    @property
    def updates_to_goal(self) -> int | None:
        """The first policy version whose games reached the goal rate, if any."""
        return next((v for v, r in enumerate(self.rates) if v > 0 and r >= GOAL), None)

    @property
    def passed(self) -> bool:
        return self.start <= START_MAX and self.updates_to_goal is not None

    def summary(self) -> str:
        rates = ", ".join(f"{r:.2f}" for r in self.rates)
        return (
            f"{self.learner}: success rate per policy version [{rates}] (n={self.games[0]} games each), "
            f"goal >= {GOAL} reached at update {self.updates_to_goal}, {self.seconds:.0f} s"
        )


def _transforms() -> dict[str, list[Any]]:
    """The registered sampling transform `normalize-by-env` (z-scored) when installed, else none."""
    from unstable_core.plugins import get_registry

    try:
        norm = get_registry().load("reward_transform", "normalize-by-env")
    except Exception:  # the rewards plugin is not installed: learners get the raw +-1 outcomes
        return {"sampling_transforms": []}
    return {"sampling_transforms": [norm(z_score=True)]}


async def _play(
    backend: Any, lora_path: str | None, version: int, games: int, first_idx: int, seed_repeat: int = 1
) -> list[Any]:
    """`games` games of the letter game with the policy at `lora_path`, concurrently through the backend;
    each game seed is played `seed_repeat` times in a row (groups for `group-relative`)."""
    from unstable_core.games.loop import play_game
    from unstable_core.inference.base import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=1)

    def spec(i: int) -> GameSpec:
        player = PlayerSpec(pid=0, model_uid=f"ckpt-{version}", collect_data=True)
        return GameSpec(
            game_idx=first_idx + i, env_id=ENV_ID, seed=(first_idx + i) // seed_repeat, players=[player]
        )

    return await asyncio.gather(
        *(
            play_game(
                spec(i),
                backend.generate,
                backend.tokenizer,
                lora_paths={0: lora_path},
                policy_versions={0: version},
                params=params,
                env_factory=lambda env_id: GuessTheLetterEnv(),
            )
            for i in range(games)
        )
    )


def check_learner_learns(
    learner_cls: type,
    work_dir: str | os.PathLike,
    *,
    games_per_update: int = 32,
    max_updates: int = 15,
    learning_rate: float = 2e-2,
    algorithm_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    sampling_transforms: list[Any] | None = None,
    seed_repeat: int = 1,
) -> LearningResult:
    """Train `learner_cls` on the letter game until its games reach the goal rate or `max_updates` pass.
    `sampling_transforms` replace the default (`normalize-by-env`, z-scored); `seed_repeat` plays each game
    seed that many times in a row, as the env sampler's `repeat` does."""
    import torch

    from unstable_core.inference.hf import TransformersBackend
    from unstable_core.runtime.buffer import BUFFERS

    work_dir = Path(work_dir)
    model = make_letter_model(work_dir / "letter-model", seed=seed)
    started = time.perf_counter()
    torch.manual_seed(seed)
    backend = TransformersBackend(model, device="cpu", seed=seed, gather_ms=5.0)
    learner = learner_cls(
        model,
        device="cpu",
        run_dir=work_dir / "run",
        lora_cfg={"lora_rank": 8, "lora_alpha": 16},
        learning_rate=learning_rate,
        batch_size=games_per_update,
        mini_batch_size=games_per_update,
        max_generation_len=1,
        temperature=1.0,
        seed=seed,
    )
    learner.initialize_algorithm(**(algorithm_kwargs or {}))
    transforms = (
        _transforms() if sampling_transforms is None else {"sampling_transforms": sampling_transforms}
    )
    buffer = BUFFERS[getattr(learner, "buffer_kind", "step")](10 * games_per_update, **transforms)
    result = LearningResult(learner=learner_cls.__name__)
    lora_path: str | None = None

    async def loop() -> None:
        nonlocal lora_path
        for version in range(max_updates + 1):
            first = version * games_per_update
            played = await _play(backend, lora_path, version, games_per_update, first, seed_repeat)
            wins = sum(r.info.final_rewards.get(0, -1.0) > 0 for r in played)
            result.rates.append(wins / len(played))
            result.games.append(len(played))
            if version > 0 and result.rates[-1] >= GOAL or version == max_updates:
                return
            for r in played:
                buffer.add_result(r)
            buffer.set_policy_version(version)
            learner.update(buffer.get_batch(games_per_update))
            lora_path = str(learner.save_checkpoint())

    try:
        asyncio.run(loop())
    finally:
        asyncio.run(backend.close())
    result.seconds = time.perf_counter() - started
    return result


def sign_flipped(learner_cls: type) -> type:
    """`learner_cls` with its loss's gradient negated (it ascends the loss): it must fail the check."""

    class Flipped(learner_cls):  # type: ignore[misc, valid-type]
        def _update(self, batch: list[Any], scale: float) -> dict[str, float]:
            return super()._update(batch, -scale)

    Flipped.__name__ = f"SignFlipped{learner_cls.__name__}"
    return Flipped
