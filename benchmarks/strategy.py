"""A strategy recipe, run and measured: the game's exact yardsticks (probes) per checkpoint, base against
the last checkpoint, and the last checkpoint against the game's scripted players, with the wall time.

    python3 benchmarks/strategy.py kuhn          # examples/kuhn-strategy.toml
    python3 benchmarks/strategy.py tictactoe     # examples/tictactoe-strategy.toml
    python3 benchmarks/strategy.py kuhn --run runs/<name>   # measure a run already made (no training)

Per game: the recipe (`examples/<game>-strategy.toml`), its probes, the env its games are evaluated on and
the scripted opponents. The probes run on the base model, every `--every`-th checkpoint and the last, with
the run's own template; exact figures (Kuhn's exploitability) have no interval, the others a 95% t
interval over positions. `unstable eval` then plays base and the last checkpoint against each opponent,
`--games` games per pair, seats alternated: each rate with its Wilson 95% interval, and a Fisher exact
test of base against last. Everything is also written to `<run>/strategy.json`, and the probes per
checkpoint are drawn in `<run>/strategy.png`.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from unstable_core.cli.options import add_config_argument

ROOT = Path(__file__).resolve().parent.parent
GAMES = {
    "kuhn": {
        "recipe": "examples/kuhn-strategy.toml",
        "probes": [("kuhn-exploitability", "KuhnPoker-v0-chips")],
        "eval_env": "KuhnPoker-v0-chips",
        "opponents": ["random", "optimal"],
    },
    "tictactoe": {
        "recipe": "examples/tictactoe-strategy.toml",
        "probes": [("tictactoe-tactics", "TicTacToe-v0-train")],
        "eval_env": "TicTacToe-v0-train",
        "opponents": ["random", "heuristic", "optimal"],
    },
}


def train(recipe: str, runs_dir: Path, name: str) -> tuple[Path, float]:
    """`unstable run --config RECIPE`; the run directory and its wall time in seconds."""
    started = time.monotonic()
    cmd = [sys.executable, "-m", "unstable_core", "run", "--config", str(ROOT / recipe), "--runs-dir",
           str(runs_dir), "--run-name", name]  # fmt: skip
    subprocess.run(cmd, check=True)
    return runs_dir / name, time.monotonic() - started


def probe(run_dir: Path, probes: list[tuple[str, str]], every: int) -> dict[str, Any]:
    """The probes on base, every `every`-th checkpoint and the last: {label: {probe: result dict}}."""
    from unstable_core.eval.probes import players_template, probe_players
    from unstable_core.eval.targets import checkpoints_of, resolve_argument, run_base_model
    from unstable_core.probes.catalogue import plan_probes

    steps = checkpoints_of(run_dir)
    chosen = [folder for step, folder in steps if step % every == 0 or step == steps[-1][0]]
    targets = resolve_argument(run_base_model(run_dir)) + [
        t for f in chosen for t in resolve_argument(str(f))
    ]
    planned = plan_probes(f"{name}:{env}" for name, env in probes)
    results = probe_players(planned, targets, players_template([t for t in targets if t.run_dir], None))
    return {label: {name: r.to_dict() for name, r in pairs} for label, pairs in results.items()}


def probe_records(probes: dict[str, Any]) -> list[dict[str, Any]]:
    """`probe`'s results as probes.jsonl records (step 0 for the base model, N for ckpt-N), for the plot."""
    records = []
    for label, results in probes.items():
        step = int(label.rsplit("-", 1)[1]) if label.startswith("ckpt-") else 0
        for name, result in results.items():
            records.append({"step": step, "probe": name, "env_id": result["env_id"], **result})
    return sorted(records, key=lambda r: r["step"])


def play(run_dir: Path, env_id: str, opponents: list[str], games: int, out: Path) -> list[dict[str, Any]]:
    """`unstable eval RUN base --opponent ... --env ENV --games N`: its summary's rows."""
    cmd = [sys.executable, "-m", "unstable_core", "eval", str(run_dir), "base", "--env", env_id, "--games",
           str(games), "--out", str(out)]  # fmt: skip
    for opponent in opponents:
        cmd += ["--opponent", opponent]
    subprocess.run(cmd, check=True)
    return json.loads((out / "summary.json").read_text())["results"]


def _figure(fig: dict[str, Any]) -> str:
    if fig.get("exact"):
        return f"{fig['value']:.3f}"
    return f"{fig['value']:.3f} [{fig['low']:.3f}, {fig['high']:.3f}]"


def _rate(rate: dict[str, Any]) -> str:
    return f"{rate['rate']:.3f} [{rate['lo']:.3f}, {rate['hi']:.3f}] ({rate['k']:g}/{rate['n']})"


def change_p(first: dict[str, Any], last: dict[str, Any]) -> float | None:
    """Two-sided p of a change between two probe figures: None for exact figures (no sampling error), else
    a z-test on the means with each standard error read off its 95% t interval. Unpaired, so conservative:
    both figures are measured on the same positions."""
    from unstable_core.quantiles import t_quantile

    if first.get("exact") or last.get("exact"):
        return None
    se = [(f["high"] - f["low"]) / (2 * t_quantile(max(f["n"] - 1, 1))) for f in (first, last)]
    spread = math.hypot(*se)
    if spread == 0:
        return 1.0 if first["value"] == last["value"] else 0.0
    return math.erfc(abs(last["value"] - first["value"]) / spread / math.sqrt(2))


def probe_lines(probes: dict[str, Any]) -> list[str]:
    """The probes' table (one row per model) and, per figure, the first model against the last."""
    from unstable_core.report.stats import format_p

    names = sorted({(p, f) for r in probes.values() for p, res in r.items() for f in res["figures"]})
    lines = ["| model | " + " | ".join(f"{p} {f}" for p, f in names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, results in probes.items():
        cells = [_figure(results[p]["figures"][f]) if p in results else "-" for p, f in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    labels = list(probes)
    if len(labels) < 2:
        return lines
    first, last = probes[labels[0]], probes[labels[-1]]
    lines.append("")
    for p, f in names:
        if p not in first or p not in last:
            continue
        a, b = first[p]["figures"][f], last[p]["figures"][f]
        pv = change_p(a, b)
        test = "exact, no test needed" if pv is None else f"z-test p = {format_p(pv)}"
        lines.append(f"- {p} {f}: {labels[0]} {_figure(a)} -> {labels[-1]} {_figure(b)} ({test})")
    return lines


def game_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The games against each opponent (score, non-loss rate, mean reward), then base against each other
    model per opponent: wins and non-losses with Fisher's exact test."""
    from unstable_core.report.stats import fisher_exact, format_p, wilson_interval

    lines = ["| model | opponent | games | W/D/L | score (W + D/2) | non-loss | mean reward |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        n = r["games"] - r["failed"]
        k = r["wins"] + r["draws"]
        non_loss = {"rate": k / max(n, 1), "k": k, "n": n}
        non_loss["lo"], non_loss["hi"] = wilson_interval(k, n)
        reward = "-" if r.get("mean_reward") is None else f"{r['mean_reward']:+.3f}"
        lines.append(
            f"| {r['model']} | {r['opponent']} | {n} | {r['wins']}/{r['draws']}/{r['losses']} | "
            f"{_rate(r['score'])} | {_rate(non_loss)} | {reward} |"
        )
    lines.append("")
    by = {(r["model"], r["opponent"]): r for r in rows}
    for (model, opponent), r in by.items():
        b = by.get(("base", opponent))
        if model == "base" or b is None:
            continue
        nb, nr = b["games"] - b["failed"], r["games"] - r["failed"]
        p_win = fisher_exact(b["wins"], nb, r["wins"], nr)
        p_nonloss = fisher_exact(b["wins"] + b["draws"], nb, r["wins"] + r["draws"], nr)
        lines.append(
            f"- against {opponent}: wins base {b['wins']}/{nb} -> {model} {r['wins']}/{nr} "
            f"(Fisher p = {format_p(p_win)}); non-losses {b['wins'] + b['draws']} -> "
            f"{r['wins'] + r['draws']} (p = {format_p(p_nonloss)})"
        )
    return lines


def branching_cost(run_dir: Path) -> dict[str, float] | None:
    """What branching cost the run, read from its games (every branched state, trained on or left out) and
    the learner's metrics: continuation turns a state, those of them a model generated and their seconds;
    branching's seconds an update beside the learner's; and the share of the model's turns (games and
    continuations) that were continuations. None: no branching. Runs older than the count of generated
    turns count every continuation turn as generated."""
    from unstable_core.games.players.base import SCRIPTED
    from unstable_core.io import read_jsonl

    states = turns = generated = seconds = played = 0.0
    for game in read_jsonl(run_dir / "games" / "games.jsonl"):
        for step in (s for t in game.get("trajectories", []) for s in t.get("steps", [])):
            info = step.get("step_info", {})
            played += info.get("finish_reason") != SCRIPTED
            cost = (info.get("legal") or {}).get("cost")
            if cost:
                states += 1
                turns += cost["turns"]
                generated += cost.get("generated", cost["turns"])
                seconds += cost["seconds"]
    updates = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "learner/time/update_s" in r]
    if not states or not updates:
        return None
    return {
        "updates": len(updates),
        "states": states,
        "turns_per_state": turns / states,
        "generated_per_state": generated / states,
        "seconds_per_state": seconds / states,
        "branch_seconds_per_update": seconds / len(updates),
        "learner_seconds_per_update": sum(r["learner/time/update_s"] for r in updates) / len(updates),
        "inference_share": generated / (generated + played) if generated + played else 0.0,
    }


def branching_lines(cost: dict[str, float] | None) -> list[str]:
    """`branching_cost` in words."""
    if cost is None:
        return []
    return [
        f"- branching: {cost['states']:.0f} states over {cost['updates']} updates, "
        f"{cost['turns_per_state']:.1f} continuation turns a state ({cost['generated_per_state']:.1f} of "
        f"them generated) and {cost['seconds_per_state']:.1f} s; {cost['branch_seconds_per_update']:.0f} s "
        f"an update (the learner's update: {cost['learner_seconds_per_update']:.0f} s); "
        f"{cost['inference_share']:.0%} of the model's turns were continuations"
    ]


def report(probes: dict[str, Any], rows: list[dict[str, Any]], wall_s: float | None) -> list[str]:
    """The tables as markdown lines: probes per model (first against last), then the games."""
    lines = probe_lines(probes) + [""] + game_lines(rows)
    if wall_s is not None:
        lines.append(f"- training wall time: {wall_s / 60:.1f} min")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("game", choices=sorted(GAMES))
    parser.add_argument("--run", default=None, help="measure this run directory instead of training one")
    add_config_argument(parser, "--runs-dir")
    parser.add_argument("--every", type=int, default=10, help="probe every N-th checkpoint (and the last)")
    parser.add_argument("--games", type=int, default=256, help="games per (model, opponent) pair")
    args = parser.parse_args()
    game = GAMES[args.game]
    wall_s = None
    if args.run:
        run_dir = Path(args.run)
        if not (run_dir / "config.toml").is_file() or not (run_dir / "checkpoints").is_dir():
            print(
                f"strategy.py: {run_dir} is not a run directory with checkpoints (no config.toml or "
                "checkpoints/ there); pass a folder `unstable run` made, e.g. runs/<run-name>",
                file=sys.stderr,
            )
            sys.exit(2)
    else:
        run_dir, wall_s = train(
            game["recipe"], Path(args.runs_dir), f"strategy-{args.game}-{int(time.time())}"
        )
    probes = probe(run_dir, game["probes"], args.every)
    rows = play(run_dir, game["eval_env"], game["opponents"], args.games, run_dir / "eval" / "strategy")
    cost = branching_cost(run_dir)
    lines = report(probes, rows, wall_s) + branching_lines(cost)
    print("\n".join(lines))
    out = {"run": str(run_dir), "wall_s": wall_s, "probes": probes, "games": rows, "branching": cost}
    out["report"] = lines
    (run_dir / "strategy.json").write_text(json.dumps(out, indent=1))
    from unstable_core.report.plots import plot_probes

    picture = plot_probes(probe_records(probes), run_dir / "strategy.png", f"{args.game}: {run_dir.name}")
    print(f"- curves: {picture}")


if __name__ == "__main__":
    main()
