"""Probes in a run's scheduled evaluation (`--eval-probe`): the probe actor on the tiny model (the base and a
real LoRA checkpoint, measured as `unstable eval --probe` measures them), base vs last for summary.json
and the verdict lines, the panels of curves.png, and the option's checks. A whole run with a probe is in
tests/test_run_e2e.py."""

from __future__ import annotations

import json

import pytest

from unstable_core.config import RunConfig, load_config
from unstable_core.errors import ConfigError
from unstable_core.eval.probes import run_probe
from unstable_core.probes import Probe
from unstable_core.probes.catalogue import plan_probes
from unstable_core.probes.figures import Figure
from unstable_core.report.run_probes import change_lines, probe_changes, probe_panels, probe_records
from unstable_core.runtime.actors.probes import ProbeActor
from unstable_core.runtime.launch.plan import RunPlan
from unstable_core.testing import make_tiny_adapter

PROBE, ENV = "tictactoe-tactics", "TicTacToe-v0-train"


def make_checkpoint(base_model: str, folder) -> str:
    """A LoRA checkpoint of the tiny model with non-zero random B weights, so that it changes the policy."""
    return make_tiny_adapter(base_model, folder, ["q_proj", "v_proj"], seed=7)


def test_the_probe_actor_measures_base_and_a_checkpoint_as_unstable_eval_does(tiny_model, tmp_path):
    checkpoint = make_checkpoint(tiny_model, tmp_path / "checkpoints" / "step-2")
    actor = ProbeActor(str(tmp_path), tiny_model, "move", plan_probes([f"{PROBE}:{ENV}"]), device="cpu")
    (base,) = actor.probe(0, None)
    (last,) = actor.probe(2, checkpoint)
    assert probe_records(tmp_path) == [base, last]
    assert [(r["step"], r["model"], r["probe"], r["env_id"]) for r in (base, last)] == [
        (0, "base", PROBE, ENV),
        (2, "ckpt-2", PROBE, ENV),
    ]
    for record, player in ((base, tiny_model), (last, checkpoint)):
        expected = run_probe(PROBE, player, ENV, template="move", device="cpu").figures
        assert sorted(record["figures"]) == sorted(expected) == ["block_mass", "illegal_mass", "win_mass"]
        for name, figure in expected.items():
            got = record["figures"][name]
            assert (got["n"], got["exact"]) == (figure.n, figure.exact)
            assert [got[k] for k in ("value", "low", "high")] == pytest.approx(
                [figure.value, figure.low, figure.high]
            )
    assert base["figures"]["win_mass"]["value"] != last["figures"]["win_mass"]["value"]  # the adapter is on


def record(step: int, **figures: Figure) -> dict:
    return {
        "step": step,
        "model": "base" if step == 0 else f"ckpt-{step}",
        "probe": PROBE,
        "env_id": ENV,
        "figures": {name: f.to_dict() for name, f in figures.items()},
    }


def test_base_against_the_last_checkpoint_an_exact_change_or_two_intervals():
    records = [
        record(4, win_mass=Figure.mean([0.6, 0.7, 0.8]), block_mass=Figure.mean([0.1, 0.5, 0.3]), exact=Figure.of_exact(0.25, 12)),
        record(0, win_mass=Figure.mean([0.1, 0.15, 0.2]), block_mass=Figure.mean([0.2, 0.4, 0.3]), exact=Figure.of_exact(0.5, 12)),
        record(2, win_mass=Figure.mean([0.0, 0.0, 0.1]), block_mass=Figure.mean([0.0, 0.0, 0.0]), exact=Figure.of_exact(0.0, 12)),
    ]  # fmt: skip
    changes = {c["figure"]: c for c in probe_changes(records)}
    assert {c["last_step"] for c in changes.values()} == {4}
    assert changes["exact"]["verdict"] == "exact change -0.250" and changes["exact"]["change"] == -0.25
    assert changes["win_mass"]["verdict"] == "higher: the 95% intervals do not overlap"
    assert changes["win_mass"]["base"] == records[1]["figures"]["win_mass"]
    assert changes["block_mass"]["verdict"] == "no clear change: the 95% intervals overlap"
    heading, *lines = change_lines(list(changes.values()))
    assert heading.startswith("probes, the base model vs the last checkpoint") and len(lines) == 3
    assert lines[2] == (
        f"  {PROBE} exact ({ENV}), base vs ckpt 4: 0.500 (exact, n=12) -> 0.250 (exact, n=12): exact change -0.250"
    )
    (only_base,) = probe_changes([record(0, exact=Figure.of_exact(0.5, 12))])
    assert (only_base["last"], only_base["verdict"]) == (None, "no checkpoint measured")
    panels = {label.split("\n")[0]: rest for label, *rest in probe_panels(records)}
    steps, values, lows, highs = panels["win_mass"]
    assert steps == [0, 2, 4] and values[2] == pytest.approx(0.7) and lows[2] < 0.7 < highs[2]
    assert panels["exact"] == [[0, 2, 4], [0.5, 0.0, 0.25], [0.5, 0.0, 0.25], [0.5, 0.0, 0.25]]


def test_an_eval_probe_is_planned_with_its_env_and_checked_before_the_run():
    plan = RunPlan.resolve(RunConfig(eval_every=2, eval_probes=[PROBE, f"{PROBE}:TicTacToe-v0", PROBE]))
    planned = plan.scheduled_eval.probes
    assert [p.to_dict() for p in planned] == [
        {"probe": PROBE, "env_id": ENV},
        {"probe": PROBE, "env_id": "TicTacToe-v0"},
    ]
    assert all(isinstance(p.probe, Probe) for p in planned)  # built and checked once, here
    with pytest.raises(
        ConfigError, match=r"^--eval-probe nope: unknown probe 'nope'; the probes are: .*tictactoe-tactics"
    ):
        RunPlan.resolve(RunConfig(eval_every=2, eval_probes=["nope"]))
    with pytest.raises(ConfigError, match="cannot measure KuhnPoker"):
        RunPlan.resolve(RunConfig(eval_every=2, eval_probes=[f"{PROBE}:KuhnPoker-v0-short-train"]))
    with pytest.raises(
        ConfigError, match="--eval-probe runs with the scheduled evaluation: give --eval-every"
    ):
        load_config(None, {"eval_probes": [PROBE]})
    assert json.loads(json.dumps(RunConfig(eval_every=1, eval_probes=[PROBE]).to_dict()))["eval_probes"] == [
        PROBE
    ]
