"""Pictures of a run: TrueSkill ratings of every model, and learning curves from metrics.jsonl (and the
probes of probes.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from unstable_core.io import read_jsonl
from unstable_core.league.league import league_path


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write `ratings.png` and `curves.png` into the run directory (those that have data); return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run_dir = Path(run_dir)
    written = []
    league_file = league_path(run_dir)
    if league_file.exists():
        models = json.loads(league_file.read_text()).get("models", [])
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
    keys = [
        k
        for k in (
            "learner/loss",
            "learner/policy_loss",
            "learner/value_loss",
            "learner/grad_norm",
            "learner/off_policy/kl",
        )
        if any(k in r for r in records)
    ]
    rate_panels = _rate_panels(run_dir, records)
    probe_panels = _probe_panels(run_dir)
    if keys or rate_panels or probe_panels:
        n = len(keys) + len(rate_panels) + len(probe_panels)
        fig, axes = plt.subplots(n, 1, figsize=(7, 2 * n), sharex=True, squeeze=False)
        for ax, key in zip(axes[:, 0], keys, strict=False):
            pts = [(r["step"], r[key]) for r in records if key in r]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
            ax.set_ylabel(key.split("/", 1)[1], fontsize=7)
        banded = [(p, True) for p in rate_panels] + [(p, False) for p in probe_panels]
        for ax, (panel, rate) in zip(axes[len(keys) :, 0], banded, strict=True):
            _draw_banded(ax, panel, rate)
        axes[-1, 0].set_xlabel("learner step = policy version")
        axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        fig.savefig(run_dir / "curves.png", dpi=100)
        plt.close(fig)
        written.append(run_dir / "curves.png")
    return written


def plot_probes(records: list[dict], path: str | Path, title: str = "") -> Path:
    """Draw each probe figure of `records` (probes.jsonl's form: step, probe, env_id, figures) against the
    step, a panel each, with its 95% band where it has one; write the picture to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from unstable_core.report.run_probes import probe_panels

    panels = probe_panels(records)
    if not panels:
        raise ValueError("plot_probes: the records hold no probe figure")
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2 * len(panels)), sharex=True, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        _draw_banded(ax, panel, rate=False)
    axes[0, 0].set_title(title, fontsize=9)
    axes[-1, 0].set_xlabel("learner step (0: the base model)")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def _draw_banded(ax, panel: tuple[str, list[int], list[float], list[float], list[float]], rate: bool) -> None:
    """One panel: the values per step, their 95% band unless exact, a rate's axis from 0 to 1."""
    label, xs, values, los, his = panel
    if los != values or his != values:  # an exact figure (a probe's) has no band
        ax.fill_between(xs, los, his, alpha=0.25, label="95% interval")
        ax.legend(fontsize=6, loc="best")
    ax.plot(xs, values, marker="o")
    if rate:
        ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel(label, fontsize=7)


def _probe_panels(run_dir: Path) -> list[tuple[str, list[int], list[float], list[float], list[float]]]:
    """A panel per figure of the scheduled evaluation's probes (--eval-probe), per step with its band."""
    from unstable_core.report.run_probes import probe_panels, probe_records

    return probe_panels(probe_records(run_dir))


def _rate_panels(
    run_dir: Path, records: list[dict] = ()
) -> list[tuple[str, list[int], list[float], list[float], list[float]]]:
    """(label, versions, rates, lower, upper) per rate of `checkpoint_rates`, for versions with data; with
    scheduled evaluations in the metrics `records`, their win rates replace those read from all games."""
    from unstable_core.envs.tasks import SOLO
    from unstable_core.report.checkpoint_rates import rates_by_version
    from unstable_core.report.scheduled_eval import eval_panels

    rates = rates_by_version(run_dir)
    series = {
        "invalid-move rate\n(train steps)": lambda r: r.invalid_rate,
        "format rate\n(train steps)": lambda r: r.format_rate,
    }
    scheduled = eval_panels(list(records))
    for opp in sorted({o for r in rates.values() for o in r.games}) if not scheduled else []:
        label = "task accuracy\n(correct/n)" if opp == SOLO else f"win rate (W/n) vs {opp}"
        series[label] = lambda r, o=opp: r.win_rate(o)
    panels = []
    for label, get in series.items():
        pts = [(v, get(r)) for v, r in rates.items() if get(r).n]
        if pts:
            panels.append(
                (
                    label,
                    [v for v, _ in pts],
                    [x.rate for _, x in pts],
                    [x.interval[0] for _, x in pts],
                    [x.interval[1] for _, x in pts],
                )
            )
    return panels + scheduled
