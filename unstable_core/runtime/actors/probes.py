"""Probes in a run's scheduled evaluation (`--eval-probe NAME[:ENV]`): the base model once, then each
checkpoint the scheduled evaluation evaluates (K, 2K, ...), measured by one probe actor beside the games so
that the learner never waits; each (step, probe) result is a line of `<run>/probes.jsonl` with its
figures (value, 95% interval or exact, count) and references. `ScheduledProbes` is the driver's side: it
hands the actor each due checkpoint as its folder appears, and waits for the last after the final update.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from unstable_core.errors import RunFailed, describe
from unstable_core.io import append_jsonl
from unstable_core.probes.catalogue import PlannedProbe
from unstable_core.report.run_probes import PROBES_FILE, probe_records
from unstable_core.runtime.run_dir import checkpoint_folder, checkpoint_steps

BASE = "base"
PROBE_TIMEOUT_S = 1800.0  # one measurement: a 0.5B model's 64 tactics prompts on a busy CPU took minutes


class ProbeActor:
    """Measures the run's base model, or a checkpoint (a LoRA adapter on it), with each probe; one call at
    a time, each loading the model afresh (peft changes a model's layers in place)."""

    def __init__(
        self,
        run_dir: str,
        model: str,
        template: str,
        probes: Sequence[PlannedProbe],
        device: str | None = None,
        threads: int = 1,
    ) -> None:
        self.path = Path(run_dir) / PROBES_FILE
        self.model, self.template, self.probes = model, template, list(probes)
        self.device, self.threads = device, threads

    def probe(self, step: int, adapter: str | None) -> list[dict[str, Any]]:
        """Each probe on the base model (`adapter` None, step 0) or on checkpoint `step` (its folder
        `adapter`), appended to probes.jsonl; returns those records."""
        import torch

        from unstable_core.probes.measuring import measure
        from unstable_core.probes.model_policy import policies_of

        torch.set_num_threads(self.threads)
        label = BASE if adapter is None else f"ckpt-{step}"
        records = []
        for _, policy in policies_of(self.model, [(label, adapter)], self.template, self.device):
            for planned in self.probes:
                result = measure(planned, policy).to_dict()
                result.pop("positions")  # what it saw at each position: `unstable eval --probe --json` has it
                records.append({"step": step, "model": label, **result})
        append_jsonl(self.path, records)
        return records


@attrs.define
class ScheduledProbes:
    """The driver's side of the probe actor: which checkpoints are due (every `every` steps, and the base
    model once) and the calls in flight. Steps already in probes.jsonl (a resumed run's) are not measured
    again."""

    actor: Any
    run_dir: Path
    every: int
    sent: set[int] = attrs.field(factory=set)
    calls: list[Any] = attrs.field(factory=list)

    @classmethod
    def start(cls, actor: Any, run_dir: Path, every: int, kept: int = 0) -> ScheduledProbes:
        """Start measuring: the base model first (unless measured before), then `poll` sends checkpoints.
        `kept`: the step a resumed run went on from; its records of later checkpoints (it went back to an
        older one) are not counted: those steps are measured again, and their last record is the one read."""
        probes = cls(
            actor, Path(run_dir), every, {r["step"] for r in probe_records(run_dir) if r["step"] <= kept}
        )
        if 0 not in probes.sent:
            probes.sent.add(0)
            probes.calls.append(actor.probe.remote(0, None))
        return probes

    def poll(self) -> None:
        """Send the actor each due checkpoint whose folder is complete and that it has not had yet."""
        for step in checkpoint_steps(self.run_dir, recover=False):
            if step % self.every == 0 and step not in self.sent:
                self.sent.add(step)
                folder = checkpoint_folder(self.run_dir, step)
                self.calls.append(self.actor.probe.remote(step, str(folder)))

    def finish(self, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        """After the last update: send the last due checkpoints and wait for every measurement (each at most
        `timeout_s`); one that failed or did not end stops the run with one line."""
        import ray

        self.poll()
        for call in self.calls:
            try:
                ray.get(call, timeout=timeout_s)
            except Exception as exc:  # the run's games and checkpoints are complete: it stops cleanly
                raise RunFailed(f"run stopped: the probe actor failed: {describe(exc)}") from exc
        self.calls = []
