"""Probes of `unstable eval`'s players: on a model, checkpoint or run directory named as `unstable eval` names
it (`run_probe`), and on the players of an evaluation, each base model loaded once (`probe_players`;
`probe_evaluation` for an `Evaluation`'s probes and models); a probe on a policy is
`probes.measuring.measure`'s.

`run_probe("kuhn-exploitability", "runs/<name>")` measures the run's latest checkpoint with the run's
template on the probe's default env, and `.to_dict()` is JSON-ready: what a scheduled evaluation calls on
each checkpoint folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError
from unstable_core.eval.targets import resolve_argument, run_setting
from unstable_core.games.players.catalogue import load_player_factory
from unstable_core.games.templates import get_template
from unstable_core.probes.base import player_policy
from unstable_core.probes.catalogue import AskedProbe, PlannedProbe, plan_probes
from unstable_core.probes.figures import ProbeResult
from unstable_core.probes.measuring import measure
from unstable_core.probes.model_policy import policies_of


def players_template(targets: list[Any], template: str | None) -> str:
    """The template to prompt `targets` with: `template`, else the one their runs share (a ConfigError
    naming --template where they differ), else the run default."""
    default = attrs.fields(RunConfig).prompt_template.default
    template = template or run_setting(targets, "prompt_template", default, "--template")
    get_template(template)
    return template


def run_probe(
    name: str,
    model: str,
    env_id: str | None = None,
    template: str | None = None,
    device: str | None = None,
) -> ProbeResult:
    """The probe `name` on one player: a run directory (its latest checkpoint), a checkpoint folder (a LoRA
    adapter on its base), a model (alias, hub id, folder) or a scripted player; prompted with `template`
    (default: the run's, else the run default) in `env_id` (default: the probe's)."""
    planned = plan_probes([AskedProbe(name, env_id)])
    targets = resolve_argument(model)
    (result,) = probe_players(planned, targets[-1:], players_template(targets, template), device).values()
    return result[0][1]


def probe_players(
    probes: Sequence[PlannedProbe], targets: Sequence[Any], template: str, device: str | None = None
) -> dict[str, list[tuple[str, ProbeResult]]]:
    """Each planned probe on each player of `targets` (eval targets: checkpoints, models, scripted players),
    as {player label: [(probe, result), ...]}; one copy of each base model serves its checkpoints."""
    for target in targets:
        if target.kind == "api":
            raise ConfigError(
                f"{target.label}: an API model gives no probabilities of answers; probes measure local "
                "models, checkpoints and scripted players"
            )
    out: dict[str, list[tuple[str, ProbeResult]]] = {}
    for target, policy in _policies(targets, template, device):
        out[target.label] = [(planned.name, measure(planned, policy)) for planned in probes]
    return out


def probe_evaluation(evaluation: Any) -> list[dict[str, Any]]:
    """Each probe of an `Evaluation` on each of its models, as JSON-ready results labelled with the model."""
    found = probe_players(evaluation.probes, evaluation.models, evaluation.template, evaluation.cfg.device)
    return [{"model": label, **result.to_dict()} for label, runs in found.items() for _, result in runs]


def _policies(targets: Sequence[Any], template: str, device: str | None) -> Any:
    """(target, its policy) for each target; the checkpoints of one base model as adapters of one copy of
    it, loaded after that model's own measurements (peft changes the model's layers in place)."""
    for target in targets:
        if target.kind == "player":
            yield target, player_policy(load_player_factory(target.label), name=target.label)
    bases: dict[str, dict[str, Any]] = {}
    for target in targets:
        if target.kind in ("model", "adapter"):
            bases.setdefault(target.model, {})[target.label] = target
    for base, group in bases.items():
        players = [(label, t.adapter if t.kind == "adapter" else None) for label, t in group.items()]
        for label, policy in policies_of(base, players, template, device):
            yield group[label], policy
