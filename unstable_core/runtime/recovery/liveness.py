"""Is every actor of a run still there? The stateful actors (recorder, league, buffer, collectors) must
answer a cheap question within ANSWER_TIMEOUT_S; the inference actors, which Ray restarts, are watched
without waiting on them: a restart is reported, one that is dead for good (Ray could not restart it) or
silent for ANSWER_TIMEOUT_S stops the run, naming it."""

from __future__ import annotations

import re
import time
from typing import Any

from unstable_core.runtime.graph import ActorGraph

# how long an actor may take to answer before it counts as hung: on a loaded 2-core machine a busy
# collector took over a minute; an inference actor restarting must load its model within it
ANSWER_TIMEOUT_S = 300.0
FAILED_TO_START = "it failed to start: "


class ActorDied(Exception):
    """An actor of the run is gone (`who`, `why`): the run stops and says how to resume."""

    event = "actor_died"

    def __init__(self, who: str, why: str) -> None:
        super().__init__(f"{who}: {why}")
        self.who, self.why = who, why

    @property
    def what(self) -> str:
        """What happened to `who`, for the one line that stops the run."""
        if self.why.startswith(FAILED_TO_START):
            return f"actor failed to start ({self.why[len(FAILED_TO_START) :]})"
        return f"actor died ({self.why})"


class ActorHung(ActorDied):
    """An actor of the run did not answer within `timeout_s` (alive, perhaps, but of no use)."""

    event = "actor_hung"

    def __init__(self, who: str, timeout_s: float) -> None:
        super().__init__(who, f"did not answer within {timeout_s:.0f} s")

    @property
    def what(self) -> str:
        return f"actor {self.why}"


def death_reason(exc: BaseException) -> str:
    """Why an actor died, in a few words: the error its constructor raised (e.g. a corrupt checkpoint
    on resume) or that its process died."""
    if not getattr(exc, "actor_init_failed", False):
        return "its process died"
    text = str(getattr(exc, "error_msg", "") or exc).strip()
    last = text.splitlines()[-1].strip() if text else "unknown error"
    last = re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=\w+: )", "", last)  # `pkg.mod.Error: x` -> `Error: x`
    return FAILED_TO_START + re.sub(r"^(UnstableError|ConfigError): ", "", last)


def oom_reason(exc: BaseException) -> str:
    """Why Ray's memory monitor killed an actor, in a few words with the memory figures and what to lower."""
    used = re.search(r"was ([\d.]+GB) used / ([\d.]+GB) limit", str(exc))
    figures = f", {used.group(1)} of {used.group(2)} used" if used else ""
    return (
        f"killed by Ray: the machine ran out of memory{figures}; lower --mini-batch-size or "
        "--num-train-workers, or stop other work on the machine"
    )


def check_answers(asked: dict[str, Any], timeout_s: float = ANSWER_TIMEOUT_S) -> None:
    """`asked`: actor name -> the object ref of a cheap call to it. Raises ActorDied for an actor whose
    call failed because it died, ActorHung for one that did not answer within `timeout_s`."""
    import ray

    refs = list(asked.values())
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    done = set(ready)
    for name, ref in asked.items():
        if ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                raise ActorDied(name, death_reason(exc)) from None
    for name, ref in asked.items():
        if ref not in done:
            raise ActorHung(name, timeout_s)


class InferenceWatch:
    """Asks each inference actor its process id without waiting for the answer; `poll()` returns (name,
    line) per restart seen (a new process) and raises ActorDied for one that Ray could not restart (seen
    `confirm` polls in a row, so that a call racing a restart is not mistaken for it), ActorHung for one
    that answered before and has not answered for `timeout_s` since (a restart must load its model within
    it; the first start has no limit here: a large model may take longer to load)."""

    def __init__(self, actors: dict[str, Any], timeout_s: float = ANSWER_TIMEOUT_S, confirm: int = 2) -> None:
        self.actors, self.timeout_s, self.confirm = dict(actors), timeout_s, confirm
        self.pids: dict[str, int] = {}
        self.restarts = 0
        self._asked: dict[str, tuple[Any, float]] = {}
        self._dead: dict[str, int] = {}

    def poll(self, now: float | None = None) -> list[tuple[str, str]]:
        import ray

        lines = []
        now = time.monotonic() if now is None else now
        for name, actor in self.actors.items():
            if name not in self._asked:
                self._asked[name] = (actor.pid.remote(), now)
            ref, asked_at = self._asked[name]
            if not ray.wait([ref], timeout=0)[0]:
                if name in self.pids and now - asked_at > self.timeout_s:
                    raise ActorHung(name, self.timeout_s)
                continue
            del self._asked[name]
            try:
                pid = ray.get(ref)
            except ray.exceptions.ActorUnavailableError:
                continue  # restarting: the next question waits for it
            except ray.exceptions.RayActorError as exc:
                self._dead[name] = self._dead.get(name, 0) + 1
                if self._dead[name] >= self.confirm:
                    why = death_reason(exc)
                    raise ActorDied(name, f"{why}, and Ray could not restart it") from None
                continue
            self._dead.pop(name, None)
            old = self.pids.get(name)
            if old is not None and pid != old:
                self.restarts += 1
                lines.append(
                    (
                        name,
                        f"{name} restarted (its process {old} died; now {pid}): the games it was playing "
                        "are replayed",
                    )
                )
            self.pids[name] = pid
        return lines


def check_alive(graph: ActorGraph) -> None:
    """Ask every stateful actor of `graph` (an `ActorGraph`) a cheap question: a dead one raises ActorDied at
    once, one that does not answer within ANSWER_TIMEOUT_S raises ActorHung (both name the actor)."""
    methods = {"the recorder": "snapshot", "the league": "get_current_ckpt", "the buffer": "size"}
    asked = {
        name: getattr(a, methods.get(name, "stats")).remote()
        for name, a in graph.stateful().items()
        if not name.startswith("the learner")  # busy updating for minutes: its train() call is watched
    }
    check_answers(asked)
