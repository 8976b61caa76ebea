"""Pictures of a run: TrueSkill ratings of every model, and learning curves from metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from unstable_core.io import read_jsonl


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write `ratings.png` and `curves.png` into the run directory (those that have data); return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run_dir = Path(run_dir)
    written = []
    reg_path = run_dir / "registry.json"
    if reg_path.exists():
        models = json.loads(reg_path.read_text()).get("models", [])
        ckpts = sorted((m for m in models if m["kind"] == "checkpoint"), key=lambda m: m["iteration"])
        fixed = [m for m in models if m["kind"] == "fixed" and m.get("active", True)]
        if ckpts:
            fig, ax = plt.subplots(figsize=(7, 4))
            x = [m["iteration"] for m in ckpts]
            mu = [m["mu"] for m in ckpts]
            sd = [m["sigma"] for m in ckpts]
            ax.errorbar(x, mu, yerr=sd, marker="o", capsize=3, label="checkpoints (mu ± sigma)")
            for m in fixed:
                ax.axhline(m["mu"], linestyle="--", alpha=0.6, label=f"{m['uid']} (fixed)")
            ax.set_xlabel("learner step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("TrueSkill mu")
            ax.set_title("TrueSkill ratings")
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(run_dir / "ratings.png", dpi=100)
            plt.close(fig)
            written.append(run_dir / "ratings.png")
    records = read_jsonl(run_dir / "metrics.jsonl")
    if records:
        keys = [
            k
            for k in ("learner/loss", "learner/policy_loss", "learner/value_loss", "learner/grad_norm")
            if any(k in r for r in records)
        ]
        keys += sorted(
            {
                k
                for r in records
                for k in r
                if k.startswith("collection/train/")
                and k.endswith(("format_rate", "invalid_move_rate", "win_rate"))
            }
        )
        keys += sorted(
            {k for r in records for k in r if k.startswith("collection/eval/") and k.endswith("win_rate")}
        )
        if keys:
            fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2 * len(keys)), sharex=True, squeeze=False)
            for ax, key in zip(axes[:, 0], keys, strict=True):
                pts = [(r["step"], r[key]) for r in records if key in r]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
                ax.set_ylabel(key.split("/", 1)[1], fontsize=7)
            axes[-1, 0].set_xlabel("learner step")
            axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
            fig.tight_layout()
            fig.savefig(run_dir / "curves.png", dpi=100)
            plt.close(fig)
            written.append(run_dir / "curves.png")
    return written
