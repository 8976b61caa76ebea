"""The plugin guide's examples, as a reader would use them: every code block of docs/ whose first line names
a file of an example package (`# mini-pg/mini_pg.py`) is written out, each package pip-installed into a
temporary folder (never into the shared environment) and used from subprocesses with that folder on
PYTHONPATH: `unstable plugins --json` lists each component with its description, the guide's learner
learns the letter game and its sign-flipped copy does not, the error lines the guide shows are the ones a
run prints, and one `unstable run` of one update on the tiny model uses a component of every kind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from unstable_core.io import read_jsonl
from unstable_core.testing import TINY_RUN_ARGS

ROOT = Path(__file__).resolve().parents[1]
GUIDE = [
    ROOT / "docs" / name for name in ("writing-a-plugin.md", "writing-a-learner.md", "writing-components.md")
]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE_LINE = re.compile(r"# ([a-z][\w-]*)/([\w./-]+\.(?:py|toml))$")


def guide_files() -> dict[str, dict[str, str]]:
    """package folder -> {path inside it: text}, from the blocks whose first line names the file."""
    packages: dict[str, dict[str, str]] = {}
    for page in GUIDE:
        for _, body in FENCE.findall(page.read_text(encoding="utf-8")):
            match = FILE_LINE.fullmatch(body.splitlines()[0])
            if match:
                package, path = match.groups()
                assert path not in packages.get(package, {}), f"{page.name} writes {package}/{path} twice"
                packages.setdefault(package, {})[path] = body
    return packages


def guide_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in GUIDE)


def test_every_example_package_is_complete():
    packages = guide_files()
    assert {"mini-pg", "my-plugins", "my-rewards", "my-nim"} <= set(packages)
    for package, files in packages.items():
        assert "pyproject.toml" in files, f"the guide's {package} has no pyproject.toml"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The guide's packages, pip-installed into a folder of their own."""
    root = tmp_path_factory.mktemp("guide")
    for package, files in guide_files().items():
        for path, text in files.items():
            (root / package / path).parent.mkdir(parents=True, exist_ok=True)
            (root / package / path).write_text(text, encoding="utf-8")
    target = root / "site"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-cache-dir",
         "--target", str(target), *(str(root / p) for p in guide_files())],
        capture_output=True, text=True, env={**os.environ, "PIP_NO_INDEX": "1"}, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, f"pip install failed: {result.stderr}"
    return target


def python(site: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python ARGS` with the guide's packages importable (and so discovered as plugins)."""
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "250", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_unstable_plugins_lists_the_guides_components(site):
    result = python(site, "-m", "unstable_core", "plugins", "--json")
    assert result.returncode == 0, result.stderr
    listed = {p["name"]: p for p in json.loads(result.stdout)}
    kinds = {
        "mini-pg": {"learner": ["mini-pg"]},
        "my-rewards": {"reward_transform": ["win-bonus"]},
        "my-plugins": {
            "reward_transform": ["scale-outcome", "length-penalty", "clip-rewards"],
            "env_sampler": ["round-robin"],
            "model_sampler": ["mostly-current"],
            "tracker": ["csv"],
            "backend": ["counting"],
            "template": ["terse"],
        },
        "my-nim": {
            "model_sampler": ["perfect-first"],
            "env": ["MyNim-v0"],
            "player": ["nim-perfect"],
            "probe": ["winning-takes"],
        },
    }
    for dist, provides in kinds.items():
        entry = listed[dist]
        assert (entry["version"], entry["provides"], entry.get("error")) == ("0.1.0", provides, None)
        assert all(c["description"] for c in entry["components"]), entry["components"]


ERROR_CASES = [
    {"learner": "mini-pg", "algorithm_config": {"entropy": 1}},
    {"learner": "mini-pg", "algorithm_config": {"entropy_coef": -1}},
    {"step_transforms": ["+length-penalty:alpha=1"]},
    {"step_transforms": ["+length-penalty:per_token=-1"]},
    {"sampler": "perfect-first"},
]

# one interpreter for the learner's checks and the error lines: its start (torch, transformers) is the cost
LEARNER_AND_ERRORS = textwrap.dedent("""
    import json
    import time
    from pathlib import Path
    from unstable_core.config import load_config
    from unstable_core.plugins import get_registry
    from unstable_core.runtime.launch.plan import RunPlan
    from unstable_core.runtime.launch.preflight import check_run
    from unstable_core.testing import check_learner_learns, sign_flipped

    lines = []
    for overrides in {cases!r}:
        try:
            check_run(RunPlan.resolve(load_config(None, overrides)))
            lines.append("accepted")
        except Exception as exc:
            lines.append(f"Error: {{exc}}")
    learner = get_registry().load("learner", "mini-pg")
    root = Path({root!r})
    learned = check_learner_learns(learner, root / "learns", algorithm_kwargs={{"entropy_coef": 0.001}})
    flipped = check_learner_learns(sign_flipped(learner), root / "flipped")
    print(json.dumps([lines, learned.passed, learned.summary(), flipped.passed, flipped.summary()]))
""")


def test_the_guides_learner_learns_and_the_error_lines_it_shows_are_the_runs(site, tmp_path):
    """mini-pg learns the letter game and its sign-flipped copy does not; what `unstable run` says of bad
    options (its message, before anything starts) is on the page, word for word."""
    result = python(site, "-c", LEARNER_AND_ERRORS.format(cases=ERROR_CASES, root=str(tmp_path)))
    assert result.returncode == 0, result.stderr[-3000:]
    lines, learned, learned_summary, flipped, flipped_summary = json.loads(result.stdout.splitlines()[-1])
    print(learned_summary, flipped_summary, sep="\n")
    assert learned and not flipped
    text = guide_text()
    for line in lines:
        assert line.startswith("Error: ") and line in text, line


def test_one_run_uses_a_component_of_every_kind(site, tiny_model, tmp_path):
    """The guide's learner, samplers, a transform of each stage (added to the defaults), tracker, backend
    and template in one run of one update on the tiny model."""
    args = [*TINY_RUN_ARGS, "--learning-steps", "1", "--num-eval-workers", "0"]
    result = python(
        site, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(tmp_path),
        "--run-name", "guide", *args, "--learner", "mini-pg", "--algorithm-config", '{"entropy_coef": 0.01}',
        "--env-sampler", "round-robin", "--sampler", "mostly-current", "--sampler-config", '{"p": 0.9}',
        "--final-transform", "+win-bonus:bonus=0.5", "--final-transform", "+scale-outcome:scale=2",
        "--step-transform", "+length-penalty:per_token=0.02", "--sampling-transform", "+clip-rewards",
        "--tracker", "jsonl", "--tracker", "csv", "--backend", "counting", "--template", "terse",
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    run_dir = tmp_path / "guide"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["counts"]["train_games"] > 0 and summary["inference"]["tokens_served"] > 0
    assert summary["reward_pipeline"] == {
        "final": ["role-advantage-by-env(ema_alpha=0.999)", "win-bonus(bonus=0.5)", "scale-outcome(scale=2)"],
        "step": [
            "reward-for-format(reward=1.5, penalty=0.0)",
            "penalty-for-invalid-move(reward=1.0, penalty=-1.0)",
            "length-penalty(per_token=0.02, free=0)",
        ],
        "sampling": ["normalize-by-env(z_score=True)", "clip-rewards(limit=3.0)"],
    }
    started = [line for line in result.stdout.splitlines() if line.startswith("reward pipeline: ")]
    assert len(started) == 2 and "length-penalty(per_token=0.02, free=0)" in started[0]  # start and summary
    config = (run_dir / "config.toml").read_text()
    assert '"+' not in config and '"length-penalty:per_token=0.02"' in config
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,name,value" and any(row.startswith("1,learner/loss,") for row in rows[1:])
    steps = [
        s
        for g in read_jsonl(run_dir / "games" / "games.jsonl")
        for t in g["trajectories"]
        for s in t["steps"]
    ]
    assert steps and all("Reply with your move only." in s["obs"] and s["obs"].endswith("[") for s in steps)


GAME_PARTS = textwrap.dedent("""
    import json
    from unstable_core.envs import make_env
    from unstable_core.games.players.catalogue import load_player_factory
    from unstable_core.league.league import League
    from unstable_core.plugins import get_registry
    from unstable_core.probes import measure, player_policy, uniform_policy
    from unstable_core.probes.catalogue import plan_probes

    (planned,) = plan_probes(["winning-takes"])
    perfect = measure(planned, player_policy(load_player_factory("nim-perfect")))
    uniform = measure(planned, uniform_policy)
    try:
        plan_probes(["winning-takes:MyNim-v1"])
    except Exception as exc:
        refused = str(exc)
    env = make_env("MyNim-v0")
    env.reset(num_players=2, seed=1)
    league = League()
    sampler = get_registry().load("model_sampler", "perfect-first")(seed=0, warmup=10)
    league.add_checkpoint("ckpt-0", None, 0)
    drawn = [sampler.sample_opponent(league)]
    league.add_checkpoint("ckpt-12", "checkpoints/step-12", 12)
    drawn += [league.learner_step(), sampler.sample_opponent(league)]
    print(json.dumps([perfect.to_dict()["figures"], uniform.to_dict()["figures"], refused, env.legal_moves(), drawn]))
""")


def test_the_guides_game_player_probe_and_sampler(site, tmp_path):
    """my-nim's perfect player scores 1 on its probe (its `[take N]` matched against the spellings), the
    uniform policy 1/3; a probe on an env it does not cover is one line; the sampler reads the learner step;
    `unstable eval` runs the player and the probe as the page shows."""
    result = python(site, "-c", GAME_PARTS)
    assert result.returncode == 0, result.stderr[-3000:]
    perfect, uniform, refused, legal, drawn = json.loads(result.stdout.splitlines()[-1])
    assert perfect["right_mass"]["value"] == 1.0 and perfect["illegal_mass"]["value"] == 0.0
    assert uniform["right_mass"]["value"] == pytest.approx(1 / 3) and uniform["right_mass"]["n"] == 3
    assert refused.startswith("probe 'winning-takes' cannot measure MyNim-v1: it measures MyNim-v0 only;")
    assert legal == ["[1]", "[2]", "[3]"] and drawn == ["nim-perfect", 12, "ckpt-12"]
    out = tmp_path / "eval"
    evaluated = python(site, "-m", "unstable_core", "eval", "nim-perfect", "--probe", "winning-takes", "--json",
                       "--out", str(out))  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (probed,) = json.loads(evaluated.stdout)["probe_results"]
    assert (probed["model"], probed["env_id"], probed["figures"]["right_mass"]["value"]) == (
        "nim-perfect",
        "MyNim-v0",
        1.0,
    )
