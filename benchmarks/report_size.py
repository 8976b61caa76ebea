"""report.html's size, time to write and time to open (headless Chromium) for a tiny run (the fixture run
of tests/) and a synthetic 120-checkpoint run of `--games` games (Kuhn-like, four turns each, prompts as a
chat template writes them), or of real runs (`--run`, repeatable: a copy without its checkpoints):

    python benchmarks/report_size.py --games 3000 --checkpoints 120
    python benchmarks/report_size.py --run runs/<name>
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nYou are Player {pid} in a 5 round game of Kuhn Poker.\nGame Rules:\n- Kuhn Poker uses a "
    "3-card deck with J, Q, K (J lowest, K highest)\n- Each player antes 1 chip and receives 1 card each round\n"
    "- Game continues for 5 rounds\n- The player with the most chips after all rounds wins\n\nAction Rules:\n"
    "- '[check]': Pass without betting (only if no bet is on the table)\n- '[bet]': Add 1 chip to the pot\n"
    "- '[call]': Match an opponent's bet\n- '[fold]': Surrender your hand\n\n[GAME] Starting round {r} out of 5 "
    "rounds.\nYour card is: {card}\nYour available actions are: [check], [bet]<|im_end|>\n<|im_start|>assistant\n["
)


def synthetic_run(folder: Path, games: int, checkpoints: int, seed: int = 0) -> Path:
    """A run directory of the documented formats: config.toml, games.jsonl, league.json, probes.jsonl,
    metrics.jsonl and summary.json."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "fixtures" / "run-7a23685" / "config.toml", folder / "config.toml")
    lines = []
    for g in range(games):
        version = g * checkpoints // games
        opp = rng.choice([f"ckpt-{version}", "random", "base"])
        models = {"0": f"ckpt-{version}", "1": opp}
        won = rng.random() < 0.3 + 0.4 * version / checkpoints
        trajs = []
        for pid in (0, 1):
            steps = []
            for t in range(2):
                card, move = rng.choice("JQK"), rng.choice(["check", "bet", "call", "fold"])
                legal = {"moves": ["[check]", "[bet]"], "ids": [[1], [2]], "played": rng.randint(-1, 1)}
                steps.append({"pid": pid, "env_id": "KuhnPoker-v0-short-train", "obs": RULES.format(pid=pid, r=t + 1, card=card),
                              "act": f"{move}]", "action": f"[{move}]", "completion_ids": [5, 6], "logprobs": [rng.uniform(-3, 0), -0.1],
                              "reward": rng.choice([-1.0, 1.0]), "final_reward": 1.0, "shaping": 0.0, "format_ok": True,
                              "invalid_move": rng.random() < 0.1, "model_uid": models[str(pid)], "policy_version": version,
                              "game_idx": g, "turn": 2 * t + pid, "step_info": {"finish_reason": "stop", "legal": legal}})  # fmt: skip
            trajs.append(
                {"pid": pid, "model_uid": models[str(pid)], "steps": steps, "collect_data": pid == 0}
            )
        info = {"game_idx": g, "env_id": "KuhnPoker-v0-short-train", "eval": opp == "base", "models": models,
                "final_rewards": {"0": 1.0 if won else -1.0, "1": -1.0 if won else 1.0}, "failed": False}  # fmt: skip
        lines.append(json.dumps({"info": info, "trajectories": trajs}))
    (folder / "games").mkdir()
    (folder / "games" / "games.jsonl").write_text("\n".join(lines) + "\n")
    league = [
        {"uid": f"ckpt-{v}", "kind": "checkpoint", "iteration": v, "mu": 25 + v / 10, "sigma": 2.0}
        for v in range(checkpoints + 1)
    ]
    league += [{"uid": u, "kind": "fixed", "iteration": 0, "mu": 25.0, "sigma": 1.0} for u in ("random", "base")]  # fmt: skip
    (folder / "league.json").write_text(json.dumps({"models": league}))
    probes = [{"step": s, "probe": "kuhn-exploitability", "env_id": "KuhnPoker-v0-chips",
               "figures": {"exploitability": {"value": 0.366 - 0.033 * s / checkpoints, "low": 0.3, "high": 0.4, "n": 12, "exact": True}},
               "references": {"exploitability": {"uniform": 0.458, "nash": 0.0}}} for s in range(0, checkpoints + 1, 5)]  # fmt: skip
    (folder / "probes.jsonl").write_text("".join(json.dumps(p) + "\n" for p in probes))
    metrics = [
        {"step": s, "learner/loss": rng.uniform(-1, 1), "learner/grad_norm": rng.uniform(0, 2)}
        for s in range(1, checkpoints + 1)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (folder / "summary.json").write_text(json.dumps({"elapsed_s": 3600.0}))
    return folder


def open_seconds(path: Path) -> dict[str, float]:
    """Seconds from `get` until the page's script has drawn it, the page's own time to that point (from
    navigation start), and the seconds to replay the last game listed (its chunk inflated then; none without
    Chromium)."""
    import sys

    if str(ROOT) not in sys.path:  # run as a script, benchmarks/ is on the path, not the repository
        sys.path.insert(0, str(ROOT))
    try:
        from tests.test_report_browser import _chromium, browser, open_report
    except ImportError:
        return {}
    if _chromium() is None:
        return {}
    driver = browser(_chromium())
    try:
        out = {"open_s": open_report(driver, path)}
        out["drawn_in_page_s"] = (
            float(driver.find_element("tag name", "body").get_attribute("data-ready-ms")) / 1000
        )
        last = driver.execute_script("return document.querySelectorAll('tr.game-row').length")
        started = time.monotonic()
        driver.execute_script(f"document.querySelectorAll('tr.game-row')[{last - 1}].click()")
        while not driver.execute_script(
            "return (document.querySelector('#turn pre.answer') || {}).textContent"
        ):
            time.sleep(0.01)
        out["replay_s"] = time.monotonic() - started
        return out
    finally:
        driver.quit()


def measure(folder: Path) -> dict[str, float]:
    from unstable_core.report.html.page import write_report

    started = time.monotonic()
    path = write_report(folder)
    written = time.monotonic() - started
    return {"games_mb": (folder / "games" / "games.jsonl").stat().st_size / 1e6, "report_mb": path.stat().st_size / 1e6,
            "write_s": written, **open_seconds(path)}  # fmt: skip


def measure_runs(runs: list[Path]) -> None:
    """Each run's report, written and opened from a copy of the run without its checkpoints."""
    for run in runs:
        if not (run / "config.toml").is_file():
            raise SystemExit(f"error: {run} is not a run directory (it has no config.toml)")
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(
                shutil.copytree(run, Path(tmp) / run.name, ignore=shutil.ignore_patterns("checkpoints"))
            )
            games = sum(1 for _ in (copy / "games" / "games.jsonl").open())
            figures = {k: None if v is None else round(v, 3) for k, v in measure(copy).items()}
            print(f"{run.name} ({games} games)", json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=3000)
    parser.add_argument("--checkpoints", type=int, default=120)
    parser.add_argument("--run", action="append", default=[], help="measure this run directory instead")
    args = parser.parse_args()
    if args.run:
        return measure_runs([Path(r) for r in args.run])
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny"
        shutil.copytree(
            ROOT / "tests" / "fixtures" / "run-7a23685", tiny, ignore=shutil.ignore_patterns("checkpoints")
        )
        big = synthetic_run(Path(tmp) / "big", args.games, args.checkpoints)
        for name, folder in (("tiny run (40 games, 1 step)", tiny), (f"synthetic ({args.games} games, {args.checkpoints} checkpoints)", big)):  # fmt: skip
            print(
                name, json.dumps({k: None if v is None else round(v, 3) for k, v in measure(folder).items()})
            )


if __name__ == "__main__":
    main()
