"""The collector: keeps many games in flight as coroutines of one process, spread over inference actors.

Each game is an asyncio task (not a Ray task or process), so a thousand games in flight cost megabytes.
A game whose inference actor died is replayed from scratch on another (or the restarted) actor, up to
`max_retries` times and `restart_timeout_s` of waiting in all; its index and seed stay the same, so it is
counted once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from unstable_core.errors import UnstableError, describe, root_cause
from unstable_core.games.branching import Branching
from unstable_core.games.loop import InferenceUnavailable, play_game
from unstable_core.games.players.catalogue import is_player, make_player
from unstable_core.inference.base import GenerationOutput, GenerationRequest, SamplingParams
from unstable_core.league.league import League
from unstable_core.report.scheduled_eval import summarise
from unstable_core.runtime.actors.request_batching import ActorRequests, PassBatch
from unstable_core.runtime.actors.scheduled_eval import ScheduledEval
from unstable_core.runtime.actors.scheduler import GameScheduler
from unstable_core.runtime.recovery.liveness import ANSWER_TIMEOUT_S
from unstable_core.types import GameInformation, GameResult, GameSpec

log = logging.getLogger(__name__)

MAIN_ENGINE = "main"
RECORD_TIMEOUT_S = 30.0  # how long a stopping collection waits for its finished games to be recorded


@attrs.define
class Route:
    """Where a model's turns are generated: an engine (a pool of inference actors) and a LoRA adapter."""

    engine: str
    lora_path: str | None
    version: int


def route_of(league: League, uid: str, engines: set[str]) -> Route:
    """Checkpoints and the fixed opponent 'base' (or a LoRA folder) run on the main engine; a scripted
    player (`random`, `optimal`, ...) on no engine (code in the collector, its name as the route's
    engine); any other fixed model on the engine named after it."""
    meta = league.find(uid)
    if meta is None:
        raise KeyError(f"model {uid!r} is not in the league")
    if meta.kind == "checkpoint":
        return Route(MAIN_ENGINE, meta.path_or_name, meta.iteration)
    name = meta.path_or_name
    if name in (None, "base"):
        return Route(MAIN_ENGINE, None, -1)
    if is_player(name):
        return Route(name, None, -1)
    if name in engines:
        return Route(name, None, -1)
    return Route(MAIN_ENGINE, name, -1)  # a LoRA adapter folder on the main model


def is_restarting(exc: BaseException) -> bool:
    """True for Ray's error of an actor that is restarting (a later call may succeed)."""
    import ray.exceptions as rex

    return isinstance(exc, rex.ActorUnavailableError)


def is_actor_failure(exc: BaseException) -> bool:
    """True when an exception means the inference actor died or is restarting (retry elsewhere)."""
    import ray.exceptions as rex

    return isinstance(exc, (rex.RayActorError, rex.ActorUnavailableError))


class Collector:
    """Plays training and evaluation games until stopped, streaming results to buffer, league and recorder."""

    def __init__(
        self,
        *,
        engines: dict[str, list[Any]],
        tokenizers: dict[str, str],
        buffer: Any,
        league: Any,
        recorder: Any,
        scheduler: GameScheduler,
        params: SamplingParams,
        max_turns: int = 200,
        game_timeout_s: float | None = None,
        error_allowance: int | None = 0,
        branching: Branching | None = None,
        max_retries: int = 3,
        restart_timeout_s: float = ANSWER_TIMEOUT_S,
        scheduled_eval: ScheduledEval | None = None,
    ) -> None:
        from unstable_core.inference.chat_prompt import tokenizer_for

        self.engines = engines
        self.tokenizers = {key: tokenizer_for(name) for key, name in tokenizers.items()}
        self.buffer, self.league, self.recorder = buffer, league, recorder
        self.scheduler = scheduler
        self.params = params
        self.max_turns, self.game_timeout_s, self.max_retries = max_turns, game_timeout_s, max_retries
        self.restart_timeout_s = restart_timeout_s
        self.error_allowance = error_allowance
        self.branching = branching
        self.running = False
        self.counts = {"started": 0, "finished": 0, "failed": 0, "retries": 0, "recorded": 0}
        self._recording: set[asyncio.Future] = set()  # finished games being recorded (see `_finish`)
        # scheduled evaluation (scheduled_eval): its games replace the trickle of evaluation games
        self.scheduled_eval = scheduled_eval
        self._eval_queue: deque[tuple[str, GameSpec]] = deque()
        self._eval_results: dict[str, list[GameResult]] = {}  # checkpoint uid -> its finished games
        self._eval_due: dict[str, tuple[int, int]] = {}  # checkpoint uid -> (version, games to play)
        self._eval_checked_at = 0.0
        self._eval_after: int | None = None  # checkpoints up to this one were there before: not evaluated
        self._draining = False
        self._clients: dict[tuple[str, int], ActorRequests] = {}  # (engine, actor index) -> its requests
        # the finished games of one loop pass go to recorder, league and buffer in one call each
        self._recorded = PassBatch(lambda results: self.recorder.add_games.remote(results))
        self._rated = PassBatch(lambda games: self.league.update_ratings_many.remote(games))
        self._buffered = PassBatch(lambda results: self.buffer.add_results.remote(results))
        self._released = PassBatch(lambda items: self.buffer.release_many.remote(items))
        self._league_fetch: asyncio.Future | None = None  # the league snapshot being fetched
        self._undrawn = 0  # training games admitted whose spec the scheduler has not drawn yet

    # ---- one game
    def _generator(
        self, engine: str, attempt: int, game_idx: int
    ) -> Callable[[GenerationRequest], Awaitable[GenerationOutput]]:
        pool = self.engines[engine]
        index = (game_idx + attempt) % len(pool)
        actor = pool[index]
        if hasattr(actor, "generate_many"):  # an InferenceActor: the loop pass's requests in one call
            client = self._clients.get((engine, index))
            if client is None or client.actor is not actor:
                client = self._clients[(engine, index)] = ActorRequests(actor)
            send = client.generate
        else:
            send = actor.generate.remote

        async def generate(request: GenerationRequest) -> GenerationOutput:
            try:
                return await send(request)
            except Exception as exc:
                if is_actor_failure(exc):
                    raise InferenceUnavailable(
                        f"inference actor of {engine!r} unavailable: {type(exc).__name__}"
                    ) from exc
                raise

        return generate

    def _player(self, spec: GameSpec, pid: int, engine: str, attempt: int) -> Any:
        """What plays seat `pid`: the scripted player `engine` seeded by the game and seat, or a generator on
        `engine`."""
        if engine not in self.engines and is_player(engine):
            return make_player(engine, spec.env_id, spec.seed, pid)
        return self._generator(engine, attempt, spec.game_idx)

    async def play(self, spec: GameSpec, league: League) -> GameResult:
        """Play one game, replaying it when its inference actor dies (waiting for the restart at most
        `restart_timeout_s` in all, not per replay)."""
        error = ""
        deadline: float | None = None
        for attempt in range(self.max_retries + 1):
            try:
                routes = {p.pid: route_of(league, p.model_uid, set(self.engines)) for p in spec.players}
                missing = {r.engine for r in routes.values() if not is_player(r.engine)} - set(self.engines)
                if missing:
                    raise KeyError(f"no inference engine for {sorted(missing)}")
            except KeyError as exc:
                return _failed(spec, str(exc))
            try:
                return await play_game(
                    spec,
                    {pid: self._player(spec, pid, r.engine, attempt) for pid, r in routes.items()},
                    {pid: self.tokenizers.get(r.engine) for pid, r in routes.items()},
                    lora_paths={pid: r.lora_path for pid, r in routes.items()},
                    policy_versions={pid: r.version for pid, r in routes.items()},
                    params=self.params,
                    max_turns=self.max_turns,
                    timeout_s=self.game_timeout_s,
                    error_allowance=self.error_allowance,
                    branching=None if spec.eval else self.branching,
                )
            except InferenceUnavailable as exc:
                error = str(exc)
                self.counts["retries"] += 1
                self.recorder.add_count.remote("inference_retries")  # in metrics.jsonl as counts/...
                log.warning("game %d: %s; replaying (attempt %d)", spec.game_idx, error, attempt + 1)
                engines = {r.engine for r in routes.values()} & set(self.engines)
                deadline = deadline or time.monotonic() + self.restart_timeout_s
                if not await self._await_actors(engines, attempt + 1, spec.game_idx, deadline):
                    return _failed(
                        spec,
                        f"{error}; its inference actor did not come back (waited up to {self.restart_timeout_s:.0f} s)",
                    )
        return _failed(spec, f"gave up after {self.max_retries} retries: {error}")

    async def _await_actors(self, engines: set[str], attempt: int, game_idx: int, deadline: float) -> bool:
        """Wait (until `deadline`) for the actors that `attempt` will use to answer a ping: a restarting
        actor answers once it has loaded its model. False at the deadline, or when an actor fails the ping
        a few times in a row (dead for good: Ray could not restart it; the run stops on that)."""
        for engine in engines:
            pool = self.engines[engine]
            actor = pool[(game_idx + attempt) % len(pool)]
            dead = 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or dead >= 3:
                    return False
                try:
                    await asyncio.wait_for(actor.ping.remote(), timeout=min(30.0, left))
                    break
                except asyncio.TimeoutError:
                    continue
                except Exception as exc:
                    if not is_actor_failure(exc):
                        raise
                    if not is_restarting(exc):
                        dead += 1
                    await asyncio.sleep(0.5)
        return True

    async def _league_state(self) -> dict[str, Any]:
        """The league's state for a game about to start. Games that start while a fetch is under way
        share it (one Ray call for a whole pass of new games; at most one round trip older)."""
        if self._league_fetch is None or self._league_fetch.done():
            self._league_fetch = asyncio.ensure_future(self.league.to_dict.remote())
        return await asyncio.shield(self._league_fetch)

    async def _run(self, kind: str, ticket: int | None = None) -> GameResult:
        try:
            league = League.from_dict(await self._league_state())
            spec = self.scheduler.next_train(league) if kind == "train" else self.scheduler.next_eval(league)
        finally:
            self._undrawn -= kind == "train"
        return await self._finish(spec, league, kind, ticket)

    async def _finish(
        self, spec: GameSpec, league: League, kind: str, ticket: int | None = None
    ) -> GameResult:
        """Play `spec` and send its result on (`_record`). A game that has finished is recorded whole even
        when collection stops meanwhile: `collect` cancels games in flight, not their recording."""
        result = await self.play(spec, league)
        self.counts["failed" if result.info.failed else "finished"] += 1
        self.scheduler.update(result.info)
        recording = asyncio.ensure_future(self._record(result, kind, ticket))
        self._recording.add(recording)
        recording.add_done_callback(self._recording.discard)
        return await asyncio.shield(recording)

    async def _record(self, result: GameResult, kind: str, ticket: int | None = None) -> GameResult:
        """Recorder, ratings, and (training games only) the buffer, each in one Ray call with the other games
        recorded in the same loop pass. The recorder first, and waited for: a game the run rates or learns
        from is in games.jsonl (when the recorder is dead, the game goes nowhere and the run stops, as for a
        game in flight)."""
        await self._recorded.submit(result)
        self.counts["recorded"] += 1
        info = result.info
        if not info.failed:
            pids = sorted(info.final_rewards)
            await self._rated.submit(
                ([info.models[p] for p in pids], [info.final_rewards[p] for p in pids], info.env_id)
            )
        if kind == "train" and self.buffer is not None:
            if not info.failed or info.group_id:
                await self._buffered.submit(result)  # a failed game of a group: the group is cut
            if ticket is not None:  # after its steps are held: the budget never counts them as free
                steps = None if info.failed else sum(len(t.steps) for t in result.training_trajectories)
                await self._released.submit((ticket, steps))
        return result

    # ---- scheduled evaluation
    async def _check_evals(self, force: bool = False) -> None:
        """Queue the games of every newly published checkpoint that is due for evaluation here."""
        if self.scheduled_eval is None or (not force and time.monotonic() - self._eval_checked_at < 0.5):
            return
        self._eval_checked_at = time.monotonic()
        league = League.from_dict(await self.league.to_dict.remote())
        if self._eval_after is None:  # the first check, before any game: a resumed run's old checkpoints
            current = league.get_current_ckpt()
            self._eval_after = league.get_model(current).iteration if current else 0
        for uid in league.checkpoint_uids():
            version = league.get_model(uid).iteration
            if (
                version <= self._eval_after
                or uid in self._eval_due
                or not self.scheduled_eval.due(version, self.scheduler.shard, self.scheduler.num_shards)
            ):
                continue
            specs = self.scheduler.scheduled_eval(uid, self.scheduled_eval)
            self._eval_due[uid] = (version, len(specs))
            self._eval_results[uid] = []
            self._eval_queue.extend((uid, spec) for spec in specs)

    async def _run_scheduled(self, uid: str, spec: GameSpec) -> GameResult:
        """One game of a checkpoint's scheduled evaluation; the last one logs the checkpoint's summary."""
        try:
            league = League.from_dict(await self.league.to_dict.remote())
            result = await self._finish(spec, league, "eval")
        except Exception as exc:  # counted as failed: the evaluation of the checkpoint still completes
            if is_actor_failure(exc):  # but a dead recorder or league stops the collection
                raise
            log.error("scheduled evaluation game %d crashed: %r", spec.game_idx, exc)
            result = _failed(spec, f"{type(exc).__name__}: {exc}")
        done = self._eval_results[uid]
        done.append(result)
        version, total = self._eval_due[uid]
        if len(done) == total:
            self.recorder.log_eval.remote(summarise(uid, done), version)
        return result

    def evals_pending(self) -> int:
        """Scheduled evaluation games queued or in flight."""
        return sum(total - len(self._eval_results[uid]) for uid, (_, total) in self._eval_due.items())

    async def drain_evals(self, timeout_s: float = 600.0) -> int:
        """Start no more training games, queue the evaluations of checkpoints published so far, and wait
        (up to `timeout_s`) until they are played; returns the games still pending."""
        self._draining = True
        await self._check_evals(force=True)
        deadline = time.monotonic() + timeout_s
        while self.running and self.evals_pending() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        return self.evals_pending()

    # ---- the pool of games in flight
    async def collect(
        self, num_train_workers: int, num_eval_workers: int = 0, max_games: int | None = None
    ) -> dict[str, int]:
        """Keep `num_train_workers` training and `num_eval_workers` evaluation games in flight until `stop()`
        (or until `max_games` games have been started and finished)."""
        self.running = True
        inflight: dict[asyncio.Task, str] = {}
        try:
            while self.running:
                await self._check_evals()
                room = max_games is None or self.counts["started"] < max_games
                busy = {k: sum(1 for v in inflight.values() if v == k) for k in ("train", "eval")}
                tickets = await self._admit(num_train_workers - busy["train"] if room else 0, max_games)
                for kind, want in (
                    ("train", len(tickets)),
                    ("eval", num_eval_workers - busy["eval"] if room else 0),
                ):
                    for i in range(want):
                        if max_games is not None and self.counts["started"] >= max_games:
                            break
                        if kind == "eval" and self.scheduled_eval is not None:
                            if not self._eval_queue:
                                break
                            game = self._run_scheduled(*self._eval_queue.popleft())
                        else:
                            game = self._run(kind, tickets[i] if kind == "train" else None)
                        inflight[asyncio.create_task(game)] = kind
                        # counted here, not in the task, so that the max_games check above sees it at once
                        self.counts["started"] += 1
                        await asyncio.sleep(0)  # let the task take its league snapshot and index
                if not inflight:
                    if not room:
                        break
                    await asyncio.sleep(0.2)
                    continue
                done, _ = await asyncio.wait(list(inflight), timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    inflight.pop(task)
                    if task.exception() is not None:
                        # not a game failure (those are results): a component (reward transform, buffer,
                        # league) raised; the run stops with it instead of losing every game silently
                        self.counts["failed"] += 1
                        cause = task.exception()
                        if is_actor_failure(cause):  # the run names the actor that died
                            raise cause
                        if isinstance(root_cause(cause), OSError):  # a file of the run: the driver says
                            raise root_cause(cause)  # how to go on once it is fixed
                        raise UnstableError(describe(cause)) from cause
        finally:
            for task in inflight:
                task.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)
            if self._recording:  # finished games still on their way to the recorder, ratings and buffer
                done, _ = await asyncio.wait(set(self._recording), timeout=RECORD_TIMEOUT_S)
                for recording in done:  # their errors were the cancelled games' to raise: seen, not raised
                    recording.cancelled() or recording.exception()
            self.running = False
        return dict(self.counts)

    async def _admit(self, wanted: int, max_games: int | None) -> list[int | None]:
        """Tickets of the training games that may start now: the buffer's admission decides (none while
        draining; as many as wanted without a buffer, in a run that does not learn)."""
        if max_games is not None:
            wanted = min(wanted, max_games - self.counts["started"])
        if wanted <= 0 or self._draining:
            return []
        if self.buffer is None:
            return [None] * wanted
        sampler = self.scheduler.env_sampler
        size = sampler.group_size()
        # the games admitted before but not drawn yet come first: they finish the group, or start new ones
        continuing = (sampler.group_left() - self._undrawn) % size if size > 1 else 0
        tickets = await self.buffer.admit.remote(wanted, size, continuing, self.scheduler.shard)
        self._undrawn += len(tickets)
        if tickets:  # a league snapshot fetched before the admission may predate the version it was made at
            self._league_fetch = None
        return tickets

    def stop(self) -> None:
        self.running = False

    def stats(self) -> dict[str, int]:
        return dict(self.counts)

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's samplers and RNG streams (saved with each checkpoint)."""
        return self.scheduler.state_dict()

    def pid(self) -> int:
        """The actor's process id (fault-injection tests kill it)."""
        import os

        return os.getpid()


def _failed(spec: GameSpec, error: str) -> GameResult:
    info = GameInformation(
        game_idx=spec.game_idx,
        env_id=spec.env_id,
        seed=spec.seed,
        eval=spec.eval,
        models={p.pid: p.model_uid for p in spec.players},
        learner_pids=[p.pid for p in spec.players if p.collect_data],
        failed=True,
        error=error,
        duration_s=0.0,
        group_id=spec.group_id,
        group_size=spec.group_size,
    )
    return GameResult(info=info)
