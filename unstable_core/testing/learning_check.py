"""The learning test every learner must pass: a tiny game that any correct learner masters in a few updates.

The game, "guess the letter", has one player and one turn: the prompt names the winning letter among
A-H; answering it wins (+1), anything else loses (-1). Its multi-round form (`rounds=2`) asks for a
different letter each round and scores the game once, at its end (-1 + 2 * right / rounds), so a learner
must carry the outcome back to earlier moves (an episode learner through GAE) and tell the rounds apart.

The model is a tiny random-weight Llama whose LM head puts almost all of its mass evenly on the eight
letters, so the untrained policy wins about 1/8 of the time and only learning (through the learner's LoRA
adapter: the head itself is frozen) can move it to the winning letter. Everything between is the real thing: the transformers backend sampling with the latest
adapter, the game loop, the buffer with the registered reward transforms, the learner's update and its
checkpoints. A learner passes when its success rate goes from <= 0.3 to >= 0.9 within `max_updates`.

    from unstable_core.testing.learning_check import check_learner_learns
    result = check_learner_learns(MyLearner, tmp_path)
    assert result.passed, result.summary()
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import attrs

from unstable_core.testing.learning_games import CARDS, ROUND_WORDS, Caller, HighOrLowEnv, WinOrStallEnv
from unstable_core.types import GameResult, GameSpec, PlayerSpec

LETTERS = "ABCDEFGH"
WINNING = "C"
WINNING_BY_ROUND = "CFBG"  # round k's letter in the multi-round game (round 0: WINNING)
STATE_WORDS = ROUND_WORDS + CARDS  # words the letter model reads: rounds, then the card game's cards
GAMES = ("letter", "stall", "card")
ENV_ID = "GuessTheLetter-v0"
START_MAX, GOAL = 0.3, 0.9


class GuessTheLetterEnv:
    """One player, `rounds` turns, the TextArena protocol of `play_game`: answer the letter each prompt names.
    The outcome comes only at the end: +1 when every round was right, -1 when none was (one turn: +-1)."""

    def __init__(self, winning: str = WINNING, rounds: int = 1) -> None:
        if not 1 <= rounds <= len(WINNING_BY_ROUND):
            raise ValueError(f"rounds must be in 1..{len(WINNING_BY_ROUND)}, got {rounds}")
        self.winning = winning + WINNING_BY_ROUND[1:rounds]
        self.rounds = rounds
        self.actions: list[str] = []

    def reset(self, num_players: int, seed: int | None = None) -> None:
        self.actions = []

    def get_observation(self) -> tuple[int, str]:
        letters = ", ".join(LETTERS)
        ask = f"Letters: {letters}. The winning letter is {self.winning[len(self.actions)]}. Answer with one letter."
        return 0, ask if self.rounds == 1 else f"{ask} Round: {ROUND_WORDS[len(self.actions)]}"

    def legal_moves(self) -> list[str]:
        """The eight letters: learners that score every legal answer read them (`games.legal_answers`)."""
        return list(LETTERS)

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        self.actions.append((action or "").strip("[] \n"))
        return len(self.actions) == self.rounds, {}

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, str]]]:
        right = sum(a == w for a, w in zip(self.actions, self.winning, strict=False))
        return {0: -1.0 + 2.0 * right / self.rounds}, {
            0: {"reason": f"{right} of {self.rounds} letters right"}
        }


def make_letter_model(folder: str | os.PathLike, hidden_size: int = 32, seed: int = 0) -> str:
    """A tiny Llama (SmolLM2's tokenizer) whose LM head favours the letters A-H equally: the residual stream
    carries a large constant in dimension 0, which each letter's head row reads (logit ~ +14, the rest of
    the vocabulary ~ 0), and each letter also reads one dimension of its own, which LoRA can learn to raise.
    The words naming the rounds (and the card game's cards) carry a dimension each (from the top) in place
    of dimension 0, which the letters read as they read dimension 0: the multi-round game's prompt ends with
    one, so each round is answered from its own direction of the residual stream (the game tests learners'
    credit assignment, not a random network's powers of reading)."""
    import torch

    from unstable_core.model_loading import DEFAULT_MODEL, load_tokenizer
    from unstable_core.testing.tiny_model import tiny_llama

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(DEFAULT_MODEL)
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    model = tiny_llama(tok, hidden_size, tie_word_embeddings=False)
    with torch.no_grad():
        embed = model.get_input_embeddings().weight
        embed[:, 0] = 10.0  # dominates the RMS norm: h[0] ~ sqrt(H)
        for k, word in enumerate(STATE_WORDS):
            (token,) = tok.encode(" " + word, add_special_tokens=False)
            embed[token, 0] = 0.0
            embed[token, hidden_size - 1 - k] = 10.0
        head = model.get_output_embeddings().weight
        head.normal_(0.0, 0.02)
        for k, letter in enumerate(LETTERS):
            (token,) = tok.encode(letter, add_special_tokens=False)
            head[token] = 0.0
            head[token, 0] = 14.0 / hidden_size**0.5
            head[token, hidden_size - len(STATE_WORDS) :] = 14.0 / hidden_size**0.5
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


def run_default_transforms() -> dict[str, list[Any]]:
    """The reward transforms of `unstable run`'s defaults (final, step and sampling stages), instantiated
    through the plugin registry: `check_learner_learns(cls, dir, **run_default_transforms())`."""
    from unstable_core.config import RunConfig
    from unstable_core.runtime.launch.components import instantiate

    cfg = RunConfig()
    return {
        f"{stage}_transforms": [
            instantiate("reward_transform", t) for t in getattr(cfg, f"{stage}_transforms")
        ]
        for stage in ("final", "step", "sampling")
    }


def _bare(observation: str, tokenizer: Any) -> str:
    """The multi-round game's template: the observation alone, so that its last token (the round's word)
    is the position the answer is sampled from."""
    return observation


def _game_spec(game: str, version: int, game_idx: int, seed_repeat: int) -> GameSpec:
    """Seat 0 is the policy of `version` (training data); the card game's seat 1 is the fixed caller. Each
    seed is played `seed_repeat` times in a row, as one group when that is more than once."""
    players = [PlayerSpec(pid=0, model_uid=f"ckpt-{version}", collect_data=True)]
    if game == "card":
        players.append(PlayerSpec(pid=1, model_uid="caller"))
    seed = game_idx // seed_repeat
    return GameSpec(
        game_idx=game_idx,
        env_id=f"{ENV_ID}-{game}",
        seed=seed,
        players=players,
        group_id=f"seed-{seed}" if seed_repeat > 1 else "",
        group_size=seed_repeat,
    )


def _env_factory(game: str, rounds: int) -> Any:
    if game == "stall":
        return lambda env_id: WinOrStallEnv()
    if game == "card":
        return lambda env_id: HighOrLowEnv()
    return lambda env_id: GuessTheLetterEnv(rounds=rounds)


def succeeded(result: GameResult) -> bool:
    """Whether seat 0 won (the letter game: every round right)."""
    return result.info.final_rewards.get(0, -1.0) >= 1.0


@attrs.define
class _Games:
    """How the check plays the games of one update: the game and its settings, through the backend."""

    backend: Any
    game: str
    rounds: int
    seed_repeat: int
    per_update: int

    @property
    def steps_per_update(self) -> int:
        """Training steps of one update's games (one per turn of seat 0)."""
        steps_per_game = (
            self.rounds if self.game == "letter" else WinOrStallEnv().max_turns if self.game == "stall" else 1
        )
        return self.per_update * steps_per_game

    async def play(self, update: int, policy_version: int, lora_path: str | None) -> list[GameResult]:
        """The games of `update` (the same seeds whichever policy plays them) with the policy of
        `policy_version` at `lora_path`, concurrently; each game seed is played `seed_repeat` times in a
        row (groups for `group-relative`)."""
        from unstable_core.games.loop import play_game
        from unstable_core.inference.base import SamplingParams

        params = SamplingParams(temperature=1.0, max_tokens=1)
        # the prompt's last word is the state the policy must read
        bare = self.game != "letter" or self.rounds > 1
        generate: dict[int, Any] = {0: self.backend.generate}
        if self.game == "card":
            generate[1] = Caller()

        def play(i: int) -> Any:
            spec = _game_spec(self.game, policy_version, update * self.per_update + i, self.seed_repeat)
            return play_game(
                spec,
                {pid: generate[pid] for pid in range(spec.num_players)},
                self.backend.tokenizer,
                lora_paths={0: lora_path, 1: None},
                policy_versions={0: policy_version, 1: -1},
                params=params,
                env_factory=_env_factory(self.game, self.rounds),
                templates={"default": _bare} if bare else None,
            )

        return await asyncio.gather(*(play(i) for i in range(self.per_update)))


@attrs.define
class _Trainer:
    """The learner under test and its buffer; `mu_shift` moves each behaviour log-prob by +-mu_shift."""

    learner: Any
    buffer: Any
    mu_shift: float
    coins: random.Random  # a seeded coin per token for the shift
    followers: list[Any] = attrs.field(factory=list)  # the other ranks' processes of a data-parallel learner

    @classmethod
    def create(
        cls,
        learner_cls: type,
        model: str,
        work_dir: Path,
        steps: int,
        *,
        learning_rate: float,
        seed: int,
        algorithm_kwargs: dict[str, Any] | None,
        transforms: dict[str, list[Any]],
        mu_shift: float,
        workers: int = 1,
        autocast: bool = False,
    ) -> _Trainer:
        """A learner of `learner_cls` on `model` (LoRA rank 8) whose every update takes `steps` steps, and a
        buffer of its kind for ten updates' steps with the reward `transforms` of each stage. With `workers`
        > 1 this process is rank 0 of a gloo group whose other ranks are spawned processes."""
        from unstable_core.learners.data_parallel import LearnerGroup
        from unstable_core.runtime.actors.buffer import BUFFERS

        settings = {
            "lora_config": {"lora_rank": 8, "lora_alpha": 16},
            "learning_rate": learning_rate,
            "batch_size": steps,
            "mini_batch_size": max(1, steps // workers),  # a micro-batch per worker at least
            "max_generation_len": 1,
            "temperature": 1.0,
            "seed": seed,
            "learner_autocast": autocast,
        }
        spec = (learner_cls, model, work_dir, settings, algorithm_kwargs or {})
        learner = _check_learner(*spec, rank=0)
        group = LearnerGroup.here(workers)
        followers = group.spawn(_follower, spec, ranks=range(1, workers))
        group.join(learner, 0)
        buffer = BUFFERS[getattr(learner, "buffer_kind", "step")](10 * steps, **transforms)
        return cls(learner, buffer, mu_shift, random.Random(seed), followers)

    def close(self) -> None:
        """End the other ranks of a data-parallel learner and leave its group."""
        from unstable_core.learners.data_parallel import leave, wait_for

        if self.learner.data_parallel is not None:
            self.learner.data_parallel.broadcast(None)
            wait_for(self.followers, timeout_s=60)
            leave()

    def update(self, games: list[GameResult], version: int) -> str:
        """One update on `games` as the data of policy `version`; returns the new adapter's path."""
        added = 0
        for r in games:
            for step in (s for t in r.training_trajectories for s in t.steps):
                step.logprobs = [
                    lp + self.coins.choice((-self.mu_shift, self.mu_shift)) for lp in step.logprobs
                ]
            added += self.buffer.add_result(r)
        self.buffer.set_policy_version(version)
        batch = self.buffer.get_batch(added)
        if self.learner.data_parallel is not None:
            self.learner.data_parallel.broadcast(batch)  # the other ranks take the same update
        self.learner.update(batch)
        return str(self.learner.save_checkpoint())


def _check_learner(
    learner_cls: type,
    model: str,
    work_dir: Path,
    settings: dict[str, Any],
    algorithm_kwargs: dict[str, Any],
    rank: int,
) -> Any:
    learner = learner_cls.create(model, device="cpu", run_dir=work_dir / f"run-{rank}", **settings)
    learner.initialize_algorithm(**algorithm_kwargs)
    return learner


def _follower(group: Any, rank: int, spec: tuple[Any, ...]) -> None:
    """A spawned rank > 0 of the check's data-parallel learner: the same learner, updated on rank 0's batches."""
    from unstable_core.learners.data_parallel import follow

    group.run(_check_learner(*spec, rank=rank), rank, follow)


async def _train_until_goal(
    games: _Games, trainer: _Trainer, result: LearningResult, max_updates: int, lag: int
) -> None:
    """Each version plays its games (their success rate goes into `result`) until one past the first reaches
    the goal or `max_updates` pass; update v trains on the same seeds played by version max(0, v - lag)."""
    paths: list[str | None] = [None]  # each version's adapter
    for version in range(max_updates + 1):
        played = await games.play(version, version, paths[version])
        behind = max(0, version - lag)
        train = played if behind == version else await games.play(version, behind, paths[behind])
        failed = [r.info.error for r in (played if train is played else played + train) if r.info.failed]
        if failed:
            raise RuntimeError(f"{len(failed)} learning-check games failed, e.g.: {failed[0]}")
        result.rates.append(sum(succeeded(r) for r in played) / len(played))
        result.games.append(len(played))
        if version > 0 and result.rates[-1] >= GOAL or version == max_updates:
            return
        paths.append(trainer.update(train, version))


def _stage_transforms(sampling: list[Any] | None, final: list[Any], step: list[Any]) -> dict[str, list[Any]]:
    """The buffer's reward transforms of each stage; `sampling` None: the default (`_transforms`)."""
    transforms = _transforms() if sampling is None else {"sampling_transforms": sampling}
    return transforms | {"final_transforms": list(final), "step_transforms": list(step)}


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
    rounds: int = 1,
    final_transforms: list[Any] = (),
    step_transforms: list[Any] = (),
    game: str = "letter",
    lag: int = 0,
    mu_shift: float = 0.0,
    learner_workers: int = 1,
    autocast: bool = False,
) -> LearningResult:
    """Train `learner_cls` on one of the check's games until its games reach the goal rate or `max_updates`
    pass. `game`: "letter" (a game counts as won when every round was right), "stall" or "card" (see
    `unstable_core.testing.learning_games`). `sampling_transforms` replace the default (`normalize-by-env`,
    z-scored); `final_transforms` and `step_transforms` (none by default) shape each game as a run's buffer
    does; `seed_repeat` plays each game seed that many times in a row, as the env sampler's `repeat` does;
    `rounds` > 1 plays the multi-round letter game.
    Off-policy data, as an asynchronous run's: with `lag` > 0 update v trains on games played by version
    max(0, v - lag) (the rates stay those of each version's own games, played beside them, never trained on);
    `mu_shift` moves each recorded behaviour log-prob by +-mu_shift (a seeded coin per token), as a sampler
    whose numerics differ from the learner's. `learner_workers` > 1 trains data-parallel: this process and
    spawned ones in a gloo group, each on its share of every update's micro-batches. `autocast`: the learner
    under `learner_autocast` (its decoder in bfloat16)."""
    import torch

    from unstable_core.inference.hf.backend import TransformersBackend

    if game not in GAMES:
        raise ValueError(f"game must be one of {', '.join(GAMES)}, got {game!r}")
    work_dir = Path(work_dir)
    model = make_letter_model(work_dir / "letter-model", seed=seed)
    started = time.perf_counter()
    torch.manual_seed(seed)
    backend = TransformersBackend(model, device="cpu", seed=seed, gather_ms=5.0)
    games = _Games(backend, game=game, rounds=rounds, seed_repeat=seed_repeat, per_update=games_per_update)
    trainer = _Trainer.create(
        learner_cls,
        model,
        work_dir,
        games.steps_per_update,
        learning_rate=learning_rate,
        seed=seed,
        algorithm_kwargs=algorithm_kwargs,
        transforms=_stage_transforms(sampling_transforms, final_transforms, step_transforms),
        mu_shift=mu_shift,
        workers=learner_workers,
        autocast=autocast,
    )
    result = LearningResult(learner=learner_cls.__name__)
    try:
        asyncio.run(_train_until_goal(games, trainer, result, max_updates, lag))
    finally:
        trainer.close()
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
