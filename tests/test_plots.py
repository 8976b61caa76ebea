"""Pictures of a run: ratings and learning curves, written only when there is data for them."""

import json

from unstable_core.io import append_jsonl
from unstable_core.plots import plot_run


def test_plots_written_from_registry_and_metrics(tmp_path):
    assert plot_run(tmp_path) == []
    models = [
        {"uid": f"ckpt-{i}", "kind": "checkpoint", "iteration": i, "mu": 25.0 + i, "sigma": 8.0 - i}
        for i in range(3)
    ] + [{"uid": "base", "kind": "fixed", "iteration": 0, "mu": 24.0, "sigma": 3.0, "active": True}]
    (tmp_path / "registry.json").write_text(json.dumps({"models": models}))
    append_jsonl(
        tmp_path / "metrics.jsonl",
        [{"step": s, "learner/loss": 1.0 / s, "collection/train/E/format_rate": 0.1 * s} for s in (1, 2, 3)],
    )
    written = plot_run(tmp_path)
    assert [p.name for p in written] == ["ratings.png", "curves.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)
