"""Pictures of a run: ratings and learning curves, written only when there is data for them."""

import json

from unstable_core.io import append_jsonl
from unstable_core.report.plots import plot_run


def test_plots_written_from_the_league_and_metrics(tmp_path):
    assert plot_run(tmp_path) == []
    models = [
        {"uid": f"ckpt-{i}", "kind": "checkpoint", "iteration": i, "mu": 25.0 + i, "sigma": 8.0 - i}
        for i in range(3)
    ] + [{"uid": "base", "kind": "fixed", "iteration": 0, "mu": 24.0, "sigma": 3.0, "active": True}]
    (tmp_path / "league.json").write_text(json.dumps({"models": models}))
    append_jsonl(
        tmp_path / "metrics.jsonl",
        [{"step": s, "learner/loss": 1.0 / s, "collection/train/E/format_rate": 0.1 * s} for s in (1, 2, 3)],
    )
    written = plot_run(tmp_path)
    assert [p.name for p in written] == ["ratings.png", "curves.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


def test_curves_draw_rates_per_checkpoint_with_their_intervals(tmp_path):
    from unstable_core.report.plots import _rate_panels

    games = []
    for v in range(3):
        steps = [{"policy_version": v, "invalid_move": i < 3 - v, "format_ok": True} for i in range(4)]
        games.append(
            {
                "info": {"models": {"0": f"ckpt-{v}", "1": f"ckpt-{v}"}, "final_rewards": {"0": 0, "1": 0}},
                "trajectories": [{"pid": 0, "collect_data": True, "steps": steps}],
            }
        )
        games.append(
            {
                "info": {
                    "models": {"0": f"ckpt-{v}", "1": "base"},
                    "final_rewards": {"0": 1, "1": -1},
                    "eval": True,
                },
                "trajectories": [],
            }
        )
    append_jsonl(tmp_path / "games" / "games.jsonl", games)
    panels = {label.split("\n")[0]: rest for label, *rest in _rate_panels(tmp_path)}
    assert set(panels) == {"invalid-move rate", "format rate", "win rate (W/n) vs base"}
    xs, rates, los, his = panels["invalid-move rate"]
    assert xs == [0, 1, 2] and rates == [0.75, 0.5, 0.25]
    assert all(lo < r < hi for lo, r, hi in zip(los, rates, his, strict=True))
    assert [p.name for p in plot_run(tmp_path)] == ["curves.png"]
