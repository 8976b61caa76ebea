"""Playing one game: a coroutine that drives a TextArena env turn by turn through an async `generate`.

Games run as coroutines inside a collector (many in flight per process), so one game holds only its env
and its steps. Anything that goes wrong inside a game ends that game as failed, with its error and its
partial trajectories; only cancellation and `InferenceUnavailable` (retry the game elsewhere) propagate.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from unstable_core.errors import UnstableError
from unstable_core.games.actions import extract_action
from unstable_core.games.branching import Branching, add_branch_values
from unstable_core.games.env_ops import (
    EnvFactory,
    InvalidMoveProbe,
    action_receiver,
    make_env,
    set_error_allowance,
)
from unstable_core.games.legal_answers import AnswerTokens, LegalReader, legal_reader, legal_record
from unstable_core.games.players.base import SCRIPTED, ScriptedPlayer
from unstable_core.games.templates import (
    PromptRenderer,
    Template,
    answer_prefix,
    answer_stop,
    get_template,
    prompt_renderer,
)
from unstable_core.inference.base import GenerationOutput, GenerationRequest, SamplingParams
from unstable_core.types import LEGAL, GameInformation, GameResult, GameSpec, PlayerSpec, Step, Trajectory

Generate = Callable[[GenerationRequest], Awaitable[GenerationOutput]]


class InferenceUnavailable(Exception):
    """Raised by `generate` when its inference actor died: play_game re-raises it so that the game is
    replayed on another actor instead of being recorded as failed."""


class GameFailed(Exception):
    """Ends the game being played as failed; the message says what happened."""


async def play_game(
    spec: GameSpec,
    generate: Generate | Mapping[int, Generate],
    tokenizer: Any,
    *,
    lora_paths: Mapping[int, str | None],
    policy_versions: Mapping[int, int],
    params: SamplingParams,
    templates: Mapping[str, Template] | None = None,
    max_turns: int = 200,
    timeout_s: float | None = None,
    env_factory: EnvFactory | None = None,
    error_allowance: int | None = 0,
    branching: Branching | None = None,
) -> GameResult:
    """Play `spec` to the end and return every seat's trajectory with the game's information.

    Seat `pid` is prompted with its PlayerSpec's template and generates with adapter `lora_paths[pid]`.
    `generate` and `tokenizer` are shared by every seat, or given per seat as `{pid: ...}` mappings
    (seats played by different base models); a seat whose `generate` is a ScriptedPlayer (the `random`
    opponent) moves from the env and its observation, without a model.
    With `params.seed` set, each turn samples with its own seed drawn from it, the game's seed and the
    turn, so that the same seeds replay the same game.
    `error_allowance` is how many invalid moves in a row a seat may retry (0, as in UnstableBaselines
    v0.2: the first one loses; None: the env's own, 1 in most TextArena games).
    An env error, a failed generation, more than `max_turns` turns or `timeout_s` seconds end the game
    as failed (`info.failed`, `info.error`). With `branching` of K > 0 samples, each legal move of every
    state a learner seat visited is then valued by K continuations (`games.branching`), at the states with
    at most its `max_moves` legal moves if that is > 0 (the others train as unbranched); a branching that
    fails leaves those values out and the game as it was. Raises UnstableError before playing when the arguments do not
    fit the spec; re-raises InferenceUnavailable and cancellation.
    """
    players = _check_arguments(
        spec, lora_paths, policy_versions, templates, max_turns, timeout_s, error_allowance
    )
    generate = _per_seat(
        generate, players, "generate", lambda g: callable(g) or isinstance(g, ScriptedPlayer)
    )
    tokenizer = _per_seat(tokenizer, players, "tokenizer", lambda t: not isinstance(t, Mapping))
    game = _Game(
        spec,
        players,
        generate,
        tokenizer,
        lora_paths,
        policy_versions,
        params,
        templates,
        env_factory or make_env,
        error_allowance,
    )
    error: str | None = None
    started = time.monotonic()
    try:
        turns = game.play(max_turns)
        await (turns if timeout_s is None else asyncio.wait_for(turns, timeout_s))
    except InferenceUnavailable:
        raise
    except GameFailed as exc:
        error = str(exc)
    except asyncio.TimeoutError:
        error = f"game timed out after {timeout_s} s (turn {len(game.steps)})"
    except Exception as exc:
        error = f"unexpected {type(exc).__name__} at turn {len(game.steps)}: {exc}"
    duration = time.monotonic() - started
    if branching is not None and branching.samples and error is None:
        await _branch(game, branching, max_turns)
    return game.result(error, duration)


async def _branch(game: _Game, branching: Branching, max_turns: int) -> None:
    """`branching.add_branch_values`, its failure logged on the game's first step instead of failing it."""
    try:
        await add_branch_values(game, branching, max_turns)
    except (InferenceUnavailable, asyncio.CancelledError):
        raise
    except Exception as exc:
        if game.steps:
            game.steps[0].step_info["branch_error"] = f"{type(exc).__name__}: {exc}"


def _per_seat(
    value: Any, players: Mapping[int, PlayerSpec], what: str, shared: Callable[[Any], bool]
) -> dict[int, Any]:
    """`{pid: value}` for every seat, from one shared value or a per-seat mapping."""
    if shared(value):
        return dict.fromkeys(players, value)
    missing = set(players) - set(value)
    if missing:
        raise UnstableError(f"play_game: {what} has no entry for seat(s) {sorted(missing)}")
    return {pid: value[pid] for pid in players}


@attrs.define
class _Game:
    """One game being played: its fixed inputs, and the steps so far (which survive a timeout)."""

    spec: GameSpec
    players: dict[int, PlayerSpec]
    generate: Mapping[int, Generate]
    tokenizer: Mapping[int, Any]
    lora_paths: Mapping[int, str | None]
    policy_versions: Mapping[int, int]
    params: SamplingParams
    templates: Mapping[str, Template] | None
    env_factory: EnvFactory
    error_allowance: int | None = None
    steps: list[Step] = attrs.field(factory=list)
    final_rewards: dict[int, float] = attrs.field(factory=dict)
    reason: str = ""
    record_legal: bool = True  # a continuation (branching) records no legal answers
    # per seat, made at its first turn: its prompt renderer, and the start and end of the answer its template opens
    _prompting: dict[int, tuple[PromptRenderer, str, str]] = attrs.field(factory=dict)
    _answer_tokens: dict[int, AnswerTokens] = attrs.field(factory=dict)

    async def play(
        self, max_turns: int, env: Any = None, first_turn: int = 0, horizon: int | None = None
    ) -> None:
        """The turns of the game, appended to `steps`; raises GameFailed when the game cannot go on. A
        continuation (branching) passes the env it replayed, the turn it stands at and, to cut it short,
        a `horizon` of turns after which it stops unfinished (no `final_rewards`)."""
        spec = self.spec
        env = self.start_env() if env is None else env
        probe = InvalidMoveProbe(env)
        takes_completion = getattr(env, "takes_completion", False)  # a task checks the whole answer
        received_action = action_receiver(env)
        reader = legal_reader(env, spec.env_id) if self.record_legal else None
        end = max_turns if horizon is None else min(max_turns, first_turn + horizon)
        for turn in range(first_turn, end):
            pid, observation = _env_call(spec, "get_observation", env.get_observation)
            if isinstance(self.generate.get(pid), ScriptedPlayer):
                step = self._scripted_step(env, pid, observation, turn)
            else:
                step = await self._generate_step(pid, observation, turn)
                if reader is not None and self.players[pid].collect_data:
                    self._record_legal(step, env, observation, reader)
            if takes_completion:
                step.action = (step.step_info.get("answer_prefix") or "") + step.act
            step.action = received_action(step.action)
            done, info, step.invalid_move = _env_call(spec, "step", probe.step, env, pid, step.action)
            if takes_completion:
                step.action = str(info.get("answer") or "")  # what the checker read as the answer
            if info:
                step.step_info["env"] = _json_ready(info)
            self.steps.append(step)
            if done:
                break
        else:
            if end < max_turns:
                return
            raise GameFailed(
                f"game did not finish within max_turns={max_turns}; raise max_turns or check the env"
            )
        rewards, game_info = _env_call(spec, "close", env.close)
        self.final_rewards, self.reason = _outcome(spec, self.players, rewards, game_info)

    def start_env(self) -> Any:
        """The game's env, made and reset with its seed and the error allowance."""
        spec = self.spec
        env = _env_call(spec, "make", self.env_factory, spec.env_id)
        _env_call(spec, "reset", env.reset, num_players=spec.num_players, seed=spec.seed)
        set_error_allowance(env, self.error_allowance)
        return env

    def _record_legal(self, step: Step, env: Any, observation: str, reader: LegalReader) -> None:
        """Put the state's legal answers on `step` (`games.legal_answers`); a reader that fails records none."""
        try:
            moves = reader(env, observation)
        except Exception:  # the reader's guess at an unusual state: the step keeps the sampled gradient
            return
        if len(moves) < 2:
            return
        tokens = self._answer_tokens.get(step.pid)
        if tokens is None:
            tokens = self._answer_tokens[step.pid] = AnswerTokens(self.tokenizer[step.pid])
        opened = step.step_info.get("answer_prefix") or ""
        step.step_info[LEGAL] = legal_record(moves, step.action, tokens, opened)

    async def _generate_step(self, pid: int, observation: Any, turn: int) -> Step:
        """Seat `pid`'s move on `observation`: prompt, completion and extracted action (not yet played)."""
        if pid not in self.players:
            raise GameFailed(
                f"env {self.spec.env_id} asked seat {pid} to move, but the game has seats {sorted(self.players)}"
            )
        if not isinstance(observation, str):
            raise GameFailed(
                f"env {self.spec.env_id} gave a {type(observation).__name__} observation, not text; "
                "use an id with an observation wrapper (e.g. its -train variant)"
            )
        player = self.players[pid]
        render, opened, stop = self._prompting_of(pid)
        prompt, prompt_ids = render(observation)
        params = self.params
        opened = opened if opened and prompt.endswith(opened) else ""  # the answer's start, in the prompt
        if opened and stop:  # the move ends there: what would follow is never played
            params = attrs.evolve(params, stop=(stop,))
        if params.seed is not None:
            params = attrs.evolve(params, seed=_turn_seed(params.seed, self.spec.seed, turn))
        request = GenerationRequest(prompt_ids=prompt_ids, lora_path=self.lora_paths[pid], params=params)
        output = await _generate(self.generate[pid], request, pid)
        if player.collect_data and not output.token_ids:
            raise GameFailed(
                f"seat {pid} ({player.model_uid}) collects training data but its backend returned no token "
                "ids: a text-only (API) model can be an opponent, never a trained seat"
            )
        action, format_ok = extract_action(opened + output.text, bracketed=bool(opened))
        info: dict[str, Any] = {"finish_reason": output.finish_reason, "seed": self.spec.seed}
        if opened:
            info["answer_prefix"] = opened
        if output.completion_tokens is not None:  # an API's own count: it gives no token ids
            info["completion_tokens"] = output.completion_tokens
        return Step(
            pid=pid,
            env_id=self.spec.env_id,
            obs=prompt,
            act=output.text,
            action=action,
            prompt_ids=prompt_ids,
            completion_ids=list(output.token_ids),
            logprobs=list(output.logprobs),
            format_ok=format_ok,
            model_uid=player.model_uid,
            policy_version=self.policy_versions[pid],
            game_idx=self.spec.game_idx,
            turn=turn,
            step_info=info,
            group_id=self.spec.group_id,
        )

    def _prompting_of(self, pid: int) -> tuple[PromptRenderer, str, str]:
        """Seat `pid`'s prompt renderer and its template's answer prefix and stop, made once per game: looking
        the template, its frame and the tokenizer's encoder up again every turn costs as much as encoding."""
        prompting = self._prompting.get(pid)
        if prompting is None:
            name, tokenizer = self.players[pid].prompt_template, self.tokenizer[pid]
            template = get_template(name, self.templates)
            renderer = prompt_renderer(name, tokenizer, self.templates)
            prompting = self._prompting[pid] = (renderer, answer_prefix(template), answer_stop(template))
        return prompting

    def _scripted_step(self, env: Any, pid: int, observation: Any, turn: int) -> Step:
        """The move of a seat played by code (ScriptedPlayer): no prompt, completion or log-probs."""
        player = self.generate[pid]
        try:
            action = player.move(env, observation)
        except Exception as exc:
            raise GameFailed(f"seat {pid} ({self.players[pid].model_uid}) could not move: {exc}") from exc
        return Step(
            pid=pid,
            env_id=self.spec.env_id,
            obs=str(observation),
            act=action,
            action=action,
            model_uid=self.players[pid].model_uid,
            policy_version=self.policy_versions[pid],
            game_idx=self.spec.game_idx,
            turn=turn,
            step_info={"finish_reason": SCRIPTED},
            group_id=self.spec.group_id,
        )

    def result(self, error: str | None, duration_s: float) -> GameResult:
        """The GameResult of the finished game (or of the failed one, from its partial steps)."""
        failed = error is not None
        trajectories = []
        for pid, player in self.players.items():
            steps = [s for s in self.steps if s.pid == pid]
            final_reward = 0.0 if failed else self.final_rewards[pid]
            for step in steps:
                step.final_reward = step.reward = final_reward
            trajectories.append(
                Trajectory(
                    pid=pid,
                    env_id=self.spec.env_id,
                    model_uid=player.model_uid,
                    steps=steps,
                    final_reward=final_reward,
                    collect_data=player.collect_data,
                )
            )
        info = GameInformation(
            game_idx=self.spec.game_idx,
            env_id=self.spec.env_id,
            seed=self.spec.seed,
            eval=self.spec.eval,
            models={pid: p.model_uid for pid, p in self.players.items()},
            learner_pids=[pid for pid, p in self.players.items() if p.collect_data],
            final_rewards={} if failed else dict(self.final_rewards),
            num_turns=len(self.steps),
            invalid_move={t.pid: any(s.invalid_move for s in t.steps) for t in trajectories},
            format_rate={t.pid: t.format_rate for t in trajectories},
            reason=self.reason,
            failed=failed,
            error=error,
            duration_s=duration_s,
            group_id=self.spec.group_id,
            group_size=self.spec.group_size,
        )
        return GameResult(info=info, trajectories=trajectories)


async def _generate(generate: Generate, request: GenerationRequest, pid: int) -> GenerationOutput:
    """One completion; a backend exception, an error output or unpaired logprobs raise GameFailed."""
    try:
        output = await generate(request)
    except InferenceUnavailable:
        raise
    except Exception as exc:
        raise GameFailed(f"generation for seat {pid} raised {type(exc).__name__}: {exc}") from exc
    if output.finish_reason == "error":
        raise GameFailed(f"generation for seat {pid} failed: {output.error or 'the backend gave no detail'}")
    if len(output.logprobs) != len(output.token_ids):
        raise GameFailed(
            f"generation for seat {pid} returned {len(output.logprobs)} logprobs for {len(output.token_ids)} tokens"
        )
    return output


def _turn_seed(seed: int, game_seed: int, turn: int) -> int:
    """The sampling seed of one turn: reproducible, and different for every game and turn."""
    import random

    return random.Random(f"{seed}:{game_seed}:{turn}").randrange(2**31)


def _env_call(spec: GameSpec, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call(*args, **kwargs)`, with an exception of the env turned into GameFailed naming the env and call."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:
        raise GameFailed(f"env {spec.env_id} raised in {what}: {type(exc).__name__}: {exc}") from exc


def _outcome(
    spec: GameSpec, players: dict[int, PlayerSpec], rewards: Any, game_info: Any
) -> tuple[dict[int, float], str]:
    """(final reward per seat, the env's reason for the end) from `env.close()`."""
    if not isinstance(rewards, Mapping) or any(pid not in rewards for pid in players):
        raise GameFailed(f"env {spec.env_id} finished without a reward for every seat: {rewards!r}")
    final_rewards = {pid: float(rewards[pid]) for pid in players}
    reasons: list[str] = []
    for pid in players:
        info = game_info.get(pid, {}) if isinstance(game_info, Mapping) else {}
        reason = str(info.get("reason", "")) if isinstance(info, Mapping) else ""
        if reason and reason not in reasons:
            reasons.append(reason)
    return final_rewards, "; ".join(reasons)


def _json_ready(info: dict[str, Any]) -> Any:
    """The env's step info as is when it is JSON-ready, else its repr (game records are JSON lines)."""
    try:
        json.dumps(info)
    except (TypeError, ValueError):
        return repr(info)
    return info


def _check_arguments(
    spec: GameSpec,
    lora_paths: Mapping[int, str | None],
    policy_versions: Mapping[int, int],
    templates: Mapping[str, Template] | None,
    max_turns: int,
    timeout_s: float | None,
    error_allowance: int | None = 0,
) -> dict[int, PlayerSpec]:
    """The seats of `spec` by pid, after checking that the arguments cover them (else UnstableError)."""
    players = {p.pid: p for p in spec.players}
    if not players or sorted(players) != list(range(len(spec.players))):
        raise UnstableError(
            f"game {spec.game_idx} ({spec.env_id}): seats must be numbered 0..n-1 once each, got "
            f"{[p.pid for p in spec.players]}; fix the GameSpec's players"
        )
    for name, mapping in (("lora_paths", lora_paths), ("policy_versions", policy_versions)):
        missing = [pid for pid in players if pid not in mapping]
        if missing:
            raise UnstableError(
                f"game {spec.game_idx}: {name} has no entry for seats {missing}; give one per seat"
            )
    for player in players.values():
        get_template(player.prompt_template, templates)
    if max_turns < 1:
        raise UnstableError(f"max_turns must be >= 1, got {max_turns}; give a positive turn limit")
    if timeout_s is not None and not timeout_s > 0:
        raise UnstableError(
            f"timeout_s must be > 0 or None, got {timeout_s}; use None for no per-game timeout"
        )
    if error_allowance is not None and (
        isinstance(error_allowance, bool) or not isinstance(error_allowance, int) or error_allowance < 0
    ):
        raise UnstableError(
            f"error_allowance must be an int >= 0 or None, got {error_allowance!r}; 0 ends the game at the "
            "first invalid move"
        )
    return players
