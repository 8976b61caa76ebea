"""`unstable eval`: counts and intervals against values computed by hand, seat alternation, how arguments
resolve (run dir -> latest checkpoint, --all-checkpoints, base), one-line errors, and real evaluations
of the tiny model through the runtime (JSON shape, files written, same seed -> same games)."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from unstable_core.cli.main import cli
from unstable_core.errors import ConfigError
from unstable_core.eval.plan import plan_games
from unstable_core.eval.targets import EvalTarget, resolve_argument, resolve_players, run_setting
from unstable_core.io import read_jsonl
from unstable_core.report.evaluation import aggregate, plain_table
from unstable_core.types import GameInformation, GameResult, GameSpec, PlannedGame, Step, Trajectory, Triple

ENV = "TicTacToe-v0-train"


def game(idx: int, model_seat: int, outcome: str, steps: list[tuple[bool, bool, int]]) -> GameResult:
    """A finished game from the model's seat: outcome win/draw/loss; steps (invalid, format_ok, tokens)."""
    mine, theirs = {"win": (1.0, -1.0), "draw": (0.0, 0.0), "loss": (-1.0, 1.0)}[outcome]
    rewards = {model_seat: mine, 1 - model_seat: theirs}
    model_steps = [
        Step(
            pid=model_seat, env_id=ENV, obs="", act="", invalid_move=inv, format_ok=ok, completion_ids=[1] * n
        )
        for inv, ok, n in steps
    ]
    other = [Step(pid=1 - model_seat, env_id=ENV, obs="", act="", completion_ids=[1] * 99)]
    info = GameInformation(
        game_idx=idx, env_id=ENV, final_rewards=rewards, num_turns=len(model_steps) + 1, eval=True
    )
    return GameResult(
        info, [Trajectory(model_seat, ENV, "m", model_steps), Trajectory(1 - model_seat, ENV, "o", other)]
    )


def test_counts_and_wilson_intervals_against_values_computed_by_hand():
    """7 wins, 2 draws, 3 losses (and one failed game) over alternating seats."""
    outcomes = ["win"] * 7 + ["draw"] * 2 + ["loss"] * 3
    triple = Triple("m", "o", ENV)
    planned, results = [], []
    for i, outcome in enumerate(outcomes):
        seat = i % 2
        planned.append(PlannedGame(triple, GameSpec(i, ENV, i), seat))
        # one invalid move in the first game; 2 turns of 5 tokens each, one of them badly formatted
        results.append(game(i, seat, outcome, [(i == 0, True, 5), (False, i % 3 != 0, 5)]))
    planned.append(PlannedGame(triple, GameSpec(12, ENV, 12), 0))
    results.append(GameResult(GameInformation(game_idx=12, env_id=ENV, failed=True, error="boom")))
    (s,) = aggregate(planned, results)
    assert (s.games, s.failed, s.wins, s.draws, s.losses, s.seat0) == (12, 1, 7, 2, 3, 6)
    # Wilson 95%, z = 1.959964: centre (p + z^2/2n) / (1 + z^2/n), half-width
    # z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n); for 7/12: 0.31951 .. 0.80674
    assert s.win_rate.rate == pytest.approx(7 / 12)
    assert s.win_rate.interval == pytest.approx((0.3195113, 0.8067397), abs=1e-6)
    # score: 7 + 2/2 = 8 of 12: 0.39062 .. 0.86188
    assert s.score.rate == pytest.approx(8 / 12)
    assert s.score.interval == pytest.approx((0.3906221, 0.8618799), abs=1e-6)
    assert s.mean_reward == pytest.approx((7 - 3) / 12)  # final rewards +1 / 0 / -1
    assert (s.invalid_rate.k, s.invalid_rate.n) == (1, 24)
    assert (s.format_rate.k, s.format_rate.n) == (24 - 4, 24)  # i = 0, 3, 6, 9 badly formatted
    assert s.mean_turns == pytest.approx(3.0) and s.tokens_per_turn == pytest.approx(
        5.0
    )  # not the opponent's 99
    d = s.to_dict()
    assert d["win_rate"]["lo"] == pytest.approx(0.3195113, abs=1e-6) and d["errors"] == {"boom": 1}
    json.dumps(d, allow_nan=False)
    assert "7/2/3" in plain_table([s], "t") and "12 (1 failed)" in plain_table([s], "t")


def test_tokens_per_turn_come_from_token_ids_else_the_apis_usage_else_are_unknown():
    """A local model's turns count their token ids, an API model's the server's `usage` (no token ids),
    `random`'s turns and an API without usage count nothing: "-" in the table, null in JSON."""
    triple = Triple("m", "o", ENV)

    def one(step_info, ids=()):
        g = game(0, 0, "win", [(False, True, 0)])
        g.trajectories[0].steps[0].completion_ids = list(ids)
        g.trajectories[0].steps[0].step_info = step_info
        (s,) = aggregate([PlannedGame(triple, GameSpec(0, ENV, 0), 0)], [g])
        return s

    assert one({}, ids=[1, 2, 3]).tokens_per_turn == 3
    assert one({"completion_tokens": 7}).tokens_per_turn == 7  # an API turn
    scripted = one({"finish_reason": "scripted"})  # random
    assert scripted.tokens_per_turn is None and scripted.to_dict()["tokens_per_turn"] is None
    assert plain_table([scripted], "t").splitlines()[-1].rstrip().endswith("-")


def test_seats_alternate_and_every_model_meets_the_same_seeds():
    models = [EvalTarget("a", "model", "x"), EvalTarget("b", "model", "y")]
    opponents = [EvalTarget("random", "player"), EvalTarget("base", "model", "x")]
    planned = plan_games(models, opponents, [ENV, "KuhnPoker-v0-train"], games=5, seed=3)
    assert len(planned) == 2 * 2 * 2 * 5 and len({g.spec.game_idx for g in planned}) == len(planned)
    by_triple = {}
    for g in planned:
        by_triple.setdefault(g.triple, []).append(g)
        assert g.spec.players[g.model_seat].model_uid == g.triple.model
        assert g.spec.players[1 - g.model_seat].model_uid == g.triple.opponent
        assert not any(p.collect_data for p in g.spec.players) and g.spec.eval  # eval never trains
    for games in by_triple.values():
        assert [g.model_seat for g in games] == [0, 1, 0, 1, 0]
    seeds = {t: [g.spec.seed for g in gs] for t, gs in by_triple.items()}
    assert seeds[Triple("a", "random", ENV)] == seeds[Triple("b", "base", ENV)]
    assert (
        plan_games(models, opponents, [ENV], 5, seed=3)[0].spec.seed
        != plan_games(models, opponents, [ENV], 5, 4)[0].spec.seed
    )


def make_run_dir(root: Path, base_model: str, steps: list[int]) -> Path:
    """A run directory as `unstable run` leaves it: config.toml and LoRA checkpoints of the base model
    (real peft adapters), plus a half-written step that must be ignored."""
    import torch
    from peft import LoraConfig, get_peft_model

    from unstable_core.model_loading import load_causal_lm

    run = root / "run-a"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text(f'model_name = "{base_model}"\n')
    for step in steps:
        torch.manual_seed(step)
        model = get_peft_model(
            load_causal_lm(base_model, device="cpu"),
            LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
        )
        model.save_pretrained(run / "checkpoints" / f"step-{step}")
    (run / "checkpoints" / "step-9.tmp").mkdir()
    (run / "checkpoints" / "step-10").mkdir()  # no adapter yet: incomplete
    return run


@pytest.fixture(scope="module")
def run_dir(tiny_model, tmp_path_factory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("runs"), tiny_model, [1, 3])


def test_a_run_dir_is_its_latest_checkpoint_or_all_of_them_and_base_its_base_model(run_dir, tiny_model):
    (latest,) = resolve_argument(str(run_dir))
    assert (latest.label, latest.kind, latest.model, latest.step) == ("ckpt-3", "adapter", tiny_model, 3)
    assert latest.adapter == str((run_dir / "checkpoints" / "step-3").resolve())
    assert [t.label for t in resolve_argument(str(run_dir), all_checkpoints=True)] == ["ckpt-1", "ckpt-3"]
    (ckpt,) = resolve_argument(str(run_dir / "checkpoints" / "step-1"))
    assert (ckpt.label, ckpt.model, ckpt.run_dir) == ("ckpt-1", tiny_model, str(run_dir.resolve()))
    models, opponents = resolve_players([str(run_dir)], ["random", "base"], all_checkpoints=True)
    assert [t.label for t in models] == ["ckpt-1", "ckpt-3"]
    assert opponents == [EvalTarget("random", "player"), EvalTarget("base", "model", tiny_model)]


def test_a_checkpoint_plays_with_its_runs_template_unless_runs_disagree(tmp_path):
    """eval's --template and --max-generation-len default to the evaluated run's settings."""

    def ckpt_of(name: str, config: str) -> EvalTarget:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.toml").write_text(config)
        return EvalTarget(f"{name}-ckpt", "adapter", "m", "a", 1, str(tmp_path / name))

    old = ckpt_of("old", 'model_name = "m"\n')  # written before the setting existed: the default
    boxed = ckpt_of("boxed", 'prompt_template = "default"\nmax_generation_len = 24\n')
    moved = ckpt_of("moved", 'prompt_template = "move"\n')
    random_player = EvalTarget("random", "player")
    assert run_setting([random_player], "prompt_template", "move", "--template") == "move"
    assert run_setting([old], "prompt_template", "qwen3", "--template") == "qwen3"
    assert run_setting([boxed, random_player], "prompt_template", "move", "--template") == "default"
    assert run_setting([boxed], "max_generation_len", 8, "--max-generation-len") == 24
    with pytest.raises(
        ConfigError,
        match=r"different prompt_template: 'default' \(boxed\), 'move' \(moved\); give --template",
    ):
        run_setting([boxed, moved], "prompt_template", "move", "--template")


def test_bad_arguments_are_one_line_errors(run_dir, tmp_path, tiny_model):
    empty = tmp_path / "empty-run"
    (empty / "checkpoints").mkdir(parents=True)
    (empty / "config.toml").write_text('model_name = "smollm2-135m"\n')
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        resolve_argument(str(empty))
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_argument("./no/such/folder")
    with pytest.raises(ConfigError, match="'base' is the base model"):
        resolve_players([str(run_dir), "smollm2-135m"], ["base"])
    with pytest.raises(ConfigError, match="none"):
        resolve_players(["random"], ["base"])
    runner = CliRunner()
    result = runner.invoke(cli, ["eval", tiny_model, "--opponent", "random", "--env", "Battleship-v0-train"])
    assert result.exit_code == 2 and "Battleship-v0-train" in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    result = runner.invoke(cli, ["eval", tiny_model, "--env", "NoSuchGame-v0"])
    assert result.exit_code == 2 and "unstable envs" in result.output
    result = runner.invoke(cli, ["eval", tiny_model, "--task", "arithmetic"])  # was: "not a task (a game?)"
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert (
        "did you mean arithmetic-1, arithmetic-2, arithmetic-3, arithmetic-4, arithmetic-5?" in result.output
    )
    result = runner.invoke(cli, ["eval", tiny_model, "--task", "TicTacToe-v0-train"])
    assert (
        result.exit_code == 2
        and "is a game, not a task: give it as --env TicTacToe-v0-train" in result.output
    )
    out = tmp_path / "never"
    result = runner.invoke(cli, ["eval", "openai:m", "--opponent", "random", "--api-concurrency", "0",
                                 "--out", str(out)])  # fmt: skip
    assert result.exit_code == 2 and "api_concurrency must be >= 1" in result.output
    assert result.output.count("\n") == 1 and not out.exists()  # refused before anything is written


def test_eval_play_and_run_share_the_api_options():
    """--base-url, --api-key-env and --api-* are one definition (RunConfig's), on every command that plays
    API models."""
    from unstable_core.cli.eval import eval_command
    from unstable_core.cli.run import play, run
    from unstable_core.config import API_FIELDS

    def api(command):
        return {p.name: (p.opts, p.help) for p in command.params if p.name in API_FIELDS}

    assert len(api(eval_command)) == len(API_FIELDS) and api(eval_command) == api(run) == api(play)


def unstable_eval(
    *args: str, expect: int = 0, timeout: float = 420, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "unstable_core", "eval", *args]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == expect, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def test_eval_of_a_run_dir_writes_games_and_summary_and_the_same_seed_replays_the_games(run_dir, tmp_path):
    """The latest checkpoint of a run against random and base through the real runtime, twice with one
    seed: --json shape, every game on disk with its exact tokens, and identical games both times."""
    common = [str(run_dir), "--opponent", "random", "--opponent", "base", "--games", "4", "--json",
              "--max-generation-len", "6", "--seed", "7", "--concurrency", "8"]  # fmt: skip
    first = json.loads(unstable_eval(*common, "--out", str(tmp_path / "a")).stdout)
    second = json.loads(unstable_eval(*common, "--out", str(tmp_path / "b")).stdout)

    assert [(r["model"], r["opponent"], r["env"]) for r in first["results"]] == [
        ("ckpt-3", "random", ENV),
        ("ckpt-3", "base", ENV),
    ]
    for r in first["results"]:
        assert r["games"] + r["failed"] == 4 and r["wins"] + r["draws"] + r["losses"] == r["games"]
        assert r["model_seat0_games"] == 2 if not r["failed"] else r["model_seat0_games"] <= 2
        for key in ("win_rate", "score", "invalid_move_rate", "format_rate"):
            assert set(r[key]) == {"k", "n", "rate", "lo", "hi"}
        assert r["mean_turns"] >= 1 and 1 <= r["tokens_per_turn"] <= 6
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["results"] == first["results"]

    games = read_jsonl(tmp_path / "a" / "games" / "games.jsonl")
    assert len(games) == 8 and all(g["info"]["eval"] for g in games)
    model_steps = [
        s for g in games for t in g["trajectories"] if t["model_uid"] == "ckpt-3" for s in t["steps"]
    ]
    assert model_steps and all(s["prompt_ids"] and s["completion_ids"] and s["obs"] for s in model_steps)
    assert {s["policy_version"] for s in model_steps} == {3}

    def moves(folder):
        records = read_jsonl(tmp_path / folder / "games" / "games.jsonl")
        return sorted(
            (g["info"]["game_idx"], s["turn"], s["act"], tuple(s["completion_ids"]))
            for g in records
            for t in g["trajectories"]
            for s in t["steps"]
        )

    assert moves("a") == moves("b")
    assert first["results"] == second["results"]


def test_a_task_is_evaluated_per_model_with_its_accuracy(run_dir, tmp_path):
    """`--task` through the real runtime: a file's items in order and a generated task, for a checkpoint and
    the base model; one row each, every answer on disk with its tokens; `--opponent` alone is refused."""
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        "".join(json.dumps({"prompt": f"{i} + 1 = ?", "answer": i + 1}) + "\n" for i in range(3))
    )
    out = json.loads(
        unstable_eval(str(run_dir), "base", "--task", str(questions), "--task", "arithmetic-2", "--games", "4",
                      "--json", "--max-generation-len", "4", "--out", str(tmp_path / "t")).stdout
    )  # fmt: skip
    rows = [(r["model"], r["task"], r["items"] + r["failed"]) for r in out["results"]]
    assert rows == [
        ("ckpt-3", str(questions), 3),  # a file of 3 items: 3, not 4
        ("base", str(questions), 3),
        ("ckpt-3", "arithmetic-2", 4),
        ("base", "arithmetic-2", 4),
    ]
    for r in out["results"]:
        assert set(r["accuracy"]) == {"k", "n", "rate", "lo", "hi"} and r["accuracy"]["k"] == r["correct"]
        assert 1 <= r["tokens_per_answer"] <= 4
    assert out["tasks"] == [str(questions), "arithmetic-2"] and out["envs"] == [] and out["opponents"] == []
    games = read_jsonl(tmp_path / "t" / "games" / "games.jsonl")
    assert len(games) == 14 and all(len(g["trajectories"]) == 1 for g in games)
    firsts = sorted(
        g["trajectories"][0]["steps"][0]["obs"] for g in games if g["info"]["env_id"] == str(questions)
    )
    assert ["0 + 1 = ?" in o for o in firsts].count(True) == 2  # each item once per model
    assert all(s["completion_ids"] for g in games for s in g["trajectories"][0]["steps"])
    assert "accuracy" in (tmp_path / "t" / "report.html").read_text()  # the results' table, a column each
    refused = unstable_eval(str(run_dir), "--task", "arithmetic-2", "--opponent", "random", expect=2)
    assert "a --task has no opponent" in refused.stderr


def test_every_game_failing_exits_1_with_one_line_as_play_does(tmp_path):
    """random against random with one turn allowed: every game fails; no model is loaded."""
    proc = unstable_eval("random", "--opponent", "random", "--games", "2", "--max-turns", "1",
                         "--out", str(tmp_path / "e"), expect=1)  # fmt: skip
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: every one of the 2 games failed") and "max_turns" in last
    assert (tmp_path / "e" / "summary.json").is_file()
    assert (tmp_path / "e" / "report.html").is_file()  # the failed games are in its browser


def test_an_api_model_is_evaluated_and_is_an_opponent(tiny_model, tmp_path):
    """`unstable eval openai:MODEL --opponent random` and `unstable eval TINY --opponent openai:MODEL`
    against a loopback OpenAI-compatible server (a fake of the boundary, which plays the first listed
    move): every game finishes, the rates are the evaluated model's own, and an API model's tokens per
    turn are the server's usage (7 per answer)."""
    from unstable_core.testing.openai_server import FakeOpenAIServer

    key_env, secret = "UNSTABLE_TEST_EVAL_KEY", "sk-eval-secret-42"
    os.environ[key_env] = secret  # the subprocesses inherit it; removed below
    try:
        with FakeOpenAIServer(key=secret) as server:
            api = ["--base-url", server.base_url, "--api-key-env", key_env, "--games", "4", "--json"]
            first = unstable_eval("openai:some-model", "--opponent", "random", *api, "--api-max-tokens", "5",
                                  "--api-concurrency", "2", "--out", str(tmp_path / "api"))  # fmt: skip
            sent = {r["body"]["max_tokens"] for r in server.chat_requests()}
            second = unstable_eval(tiny_model, "--opponent", "openai:some-model", *api,
                                   "--max-generation-len", "6", "--error-allowance", "1",
                                   "--out", str(tmp_path / "local"))  # fmt: skip
    finally:
        del os.environ[key_env]
    (r,) = json.loads(first.stdout)["results"]
    assert (r["model"], r["opponent"], r["games"], r["failed"]) == ("openai:some-model", "random", 4, 0)
    assert r["model_seat0_games"] == 2 and r["wins"] + r["draws"] + r["losses"] == 4
    assert r["invalid_move_rate"]["k"] == 0 and r["tokens_per_turn"] == 7  # the server's usage
    assert r["model_turns"] >= 4 and sent == {5}  # --api-max-tokens reached the server
    games = read_jsonl(tmp_path / "api" / "games" / "games.jsonl")
    assert all(not t["collect_data"] for g in games for t in g["trajectories"])

    (r,) = json.loads(second.stdout)["results"]
    assert (r["opponent"], r["games"] + r["failed"]) == ("openai:some-model", 4)
    assert r["games"] >= 1 and 1 <= r["tokens_per_turn"] <= 6  # the tiny model's own tokens, not 7
    for folder in ("api", "local"):
        for path in (tmp_path / folder).rglob("*"):
            assert not path.is_file() or secret.encode() not in path.read_bytes(), path


def only_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["runs/nope"], "model folder 'runs/nope' does not exist"),
        (
            ["RUN", "--opponent", "bogus"],
            "opponent 'bogus' is not a local folder nor in the Hugging Face cache",
        ),
        (["STOPPED"], "has no complete checkpoint yet; evaluate its base model with `unstable eval "),
    ],
    ids=["missing-path", "bogus-opponent", "run-without-checkpoints"],
)
def test_a_player_that_cannot_be_played_is_refused_before_anything_starts(run_dir, tmp_path, args, expected):
    """Before: `runs/nope` was taken for a hub id and failed in a traceback after Ray started (70 s), so did
    `--opponent bogus` (60 s); a run stopped before its first checkpoint (config.toml, no checkpoints/) was
    a ValueError traceback. Now: status 2 at once, naming the argument and what a player may be."""
    (tmp_path / "runs").mkdir()
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "config.toml").write_text('model_name = "smollm2-135m"\n')
    args = [{"RUN": str(run_dir), "STOPPED": str(stopped)}.get(a, a) for a in args]
    out = tmp_path / "out"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "unstable_core", "eval", *args, "--games", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [only_error_line(proc)] and expected in proc.stderr
    if "does not exist" in expected or "Hugging Face" in expected:
        assert (
            "a run directory, a checkpoint folder, a model folder, an alias or hub id, openai:MODEL"
            in proc.stderr
        )
    assert not out.exists() and time.monotonic() - started < 60  # nothing started


def test_api_game_errors_are_shown_once_each_and_failed_games_exit_1_unless_allowed(tmp_path):
    """A server refusing two requests with a 400 in FastAPI's {"detail": ...} shape (as vLLM's server
    does): the error is printed once (the first game with it, as `unstable run` prints them), as the
    server's text, and eval exits 1 unless --allow-failures. Before: nothing on the terminal, exit 0, and
    the JSON body as the error."""
    from unstable_core.testing.openai_server import FakeOpenAIServer, Scripted

    models = Scripted(body={"object": "list", "data": [{"id": "some-model"}]})  # the check before Ray
    refusal = Scripted(400, body={"detail": "max_tokens is too large for this model"})
    common = ["openai:some-model", "--opponent", "random", "--games", "4", "--api-concurrency", "1"]
    with FakeOpenAIServer(fastapi=True) as server:
        server.fail(models, refusal, refusal)
        failed = unstable_eval(*common, "--base-url", server.base_url, "--out", str(tmp_path / "a"), expect=1)
        server.fail(models, refusal)
        allowed = unstable_eval(*common, "--base-url", server.base_url, "--out", str(tmp_path / "b"),
                                "--allow-failures")  # fmt: skip
    shown = [line for line in failed.stderr.splitlines() if line.startswith("eval game ")]
    assert len(shown) == 1, failed.stderr[-3000:]
    assert re.fullmatch(
        r"eval game \d+ failed: generation for seat \d failed: openai:some-model: "
        r"http://127\.0\.0\.1:\d+/v1/chat/completions: HTTP 400: max_tokens is too large for this model",
        shown[0],
    ), shown[0]
    line = only_error_line(failed)
    assert line.startswith("Error: 2 of the 4 games failed") and "--allow-failures" in line
    assert "detail" not in failed.stderr + failed.stdout
    assert "HTTP 400: max_tokens is too large for this model" in allowed.stderr
    assert "Error:" not in allowed.stderr and "1 failed" in allowed.stdout


def test_an_api_server_that_serves_under_v1_gets_the_hint_to_add_it(tmp_path):
    """`--base-url http://HOST:PORT` for a server whose API is under /v1 (FastAPI's 404 at /models):
    before, it passed the check as a server without /models, and every game failed later."""
    from unstable_core.testing.openai_server import FakeOpenAIServer

    with FakeOpenAIServer(fastapi=True) as server:
        root = server.base_url.removesuffix("/v1")
        proc = unstable_eval("openai:some-model", "--opponent", "random", "--games", "2", "--base-url", root,
                             "--out", str(tmp_path / "e"), expect=2, timeout=120)  # fmt: skip
    assert only_error_line(proc).endswith(f"give --base-url {root}/v1")
    assert not (tmp_path / "e").exists()


def test_an_evaluation_that_fails_to_start_leaves_no_folder_and_says_why_in_one_line(tmp_path):
    """A model folder that exists but cannot be loaded: before, a ValueError traceback and an empty
    `runs/eval-*` folder (with the league file only) stayed behind."""
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama"}')
    proc = subprocess.run(
        [sys.executable, "-m", "unstable_core", "eval", str(broken), "--opponent", "random", "--games", "1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = only_error_line(proc)
    assert line.startswith("Error: evaluation stopped: ") and "no game was recorded" in line
    assert not (tmp_path / "runs").exists()


def test_a_sigterm_stops_an_evaluation_cleanly_and_keeps_its_games(tiny_model, tmp_path):
    """`kill PID` (or a job scheduler's stop) of `unstable eval` while it plays: before, Ray's own SIGTERM
    handler ended it with a C++ stack dump and exit -15; now it stops as Ctrl-C does: one line saying where
    the games are, exit 130, and no process of its Ray cluster left."""
    out = tmp_path / "e"
    cmd = [sys.executable, "-m", "unstable_core", "eval", tiny_model, "--opponent", "random", "--games", "400",
           "--max-generation-len", "4", "--concurrency", "4", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})  # fmt: skip
    games = out / "games" / "games.jsonl"
    deadline = time.monotonic() + 240
    while not (games.is_file() and games.stat().st_size > 0):
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no game was recorded in time"
        time.sleep(0.2)
    cluster = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.rstrip().endswith(f"interrupted: the games recorded are in {out}"), stderr[-3000:]
    assert "Traceback" not in stderr and "SIGTERM" not in stderr, stderr[-3000:]
    assert read_jsonl(games)  # what was played is kept
    time.sleep(2)
    left = []
    for p in cluster:
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE:
                left.append(p.name())
    assert left == []
