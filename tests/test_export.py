"""`unstable export` on games played here by the real game loop and the real transformers backend (the
tiny model) and written by the real tracker: counts, filters, valid JSON lines, and messages that give back
the exact prompt and completion."""

import asyncio
import json

import pytest
from click.testing import CliRunner

from unstable_core.cli.main import cli
from unstable_core.games import play_game
from unstable_core.games.templates import gemma3_zs, llama_instruct_zs, qwen3_reasoning, qwen3_zs
from unstable_core.inference.base import SamplingParams
from unstable_core.inference.chat_prompt import MessagesTokenizer
from unstable_core.report.export import prompt_messages
from unstable_core.runtime.actors.recorder import Recorder
from unstable_core.types import GameSpec, PlayerSpec

TTT = "TicTacToe-v0-train"


@pytest.fixture(scope="module")
def played(tiny_model, tmp_path_factory):
    """6 games of ckpt-1 against base, seats alternated; games 0-3 training games, 4-5 evaluation games.
    The untrained model loses at its first turns, so the seat that moves first always loses: game 2 is
    recorded as a win and game 4 as a draw of ckpt-1 (set here) so that every outcome has turns.
    Returns (run dir, results, tokenizer)."""
    from unstable_core.inference.hf.backend import TransformersBackend

    run_dir = tmp_path_factory.mktemp("run")

    async def main():
        backend = TransformersBackend(tiny_model, max_batch_size=4, gather_ms=1.0, device="cpu")
        try:
            specs = []
            for i in range(6):
                me = i % 2
                players = [
                    PlayerSpec(pid, "ckpt-1" if pid == me else "base", collect_data=pid == me)
                    for pid in range(2)
                ]
                specs.append(GameSpec(game_idx=i, env_id=TTT, seed=i, players=players, eval=i >= 4))
            results = await asyncio.gather(
                *(
                    play_game(
                        spec,
                        backend.generate,
                        backend.tokenizer,
                        lora_paths={0: None, 1: None},
                        policy_versions={p.pid: 1 if p.model_uid == "ckpt-1" else -1 for p in spec.players},
                        params=SamplingParams(temperature=1.0, max_tokens=6, seed=spec.seed),
                        max_turns=12,
                        error_allowance=1,
                    )
                    for spec in specs
                )
            )
            return backend.tokenizer, results
        finally:
            await backend.close()

    tokenizer, results = asyncio.run(main())
    assert [r.info.final_rewards[0] for r in results] == [-1.0] * 6  # the first mover lost every game
    results[2].info.final_rewards = {0: 1.0, 1: -1.0}
    results[4].info.final_rewards = {0: 0.0, 1: 0.0}
    tracker = Recorder(run_dir)
    for r in results:
        assert not r.info.failed, r.info.error
        tracker.add_game(r)
    tracker.close()
    return run_dir, results, tokenizer


def export(run_dir, *args):
    result = CliRunner().invoke(cli, ["export", str(run_dir), *args])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


def outcome(r, pid):
    mine, theirs = r.info.final_rewards[pid], r.info.final_rewards[1 - pid]
    return "win" if mine > theirs else "draw" if mine == theirs else "loss"


def steps_of(results, model="ckpt-1", kind=None, won=None):
    return [
        (r, t, s)
        for r in results
        if kind is None or r.info.eval == (kind == "eval")
        for t in r.trajectories
        if t.model_uid == model and (won is None or outcome(r, t.pid) == won)
        for s in t.steps
    ]


def test_chat_export_gives_back_the_exact_prompts_and_completions_of_the_model(played):
    run_dir, results, tokenizer = played
    records = export(run_dir)
    expected = steps_of(results)
    assert len(records) == len(expected) > 0
    assert all(rec["metadata"]["model"] == "ckpt-1" for rec in records)  # never base's turns by default
    by_key = {(r.info.game_idx, s.turn): (r, t, s) for r, t, s in expected}
    for rec in records:
        meta = rec["metadata"]
        r, t, s = by_key[(meta["game_idx"], meta["turn"])]
        *prompt, answer = rec["messages"]
        rendered = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        assert rendered == s.obs and tokenizer.encode(rendered, add_special_tokens=False) == s.prompt_ids
        assert answer == {"role": "assistant", "content": s.act}
        assert (meta["seat"], meta["env_id"], meta["policy_version"]) == (t.pid, TTT, 1)
        assert meta["kind"] == ("eval" if r.info.eval else "train")
        assert meta["outcome"] == outcome(r, t.pid)


def test_filters_select_outcome_kind_env_checkpoint_and_model(played):
    run_dir, results, _ = played
    wins = export(run_dir, "--outcome", "win")
    assert len(wins) == len(steps_of(results, won="win")) > 0
    assert {rec["metadata"]["outcome"] for rec in wins} <= {"win"}
    assert {rec["metadata"]["game_idx"] for rec in wins} == {2}
    draws = export(run_dir, "--outcome", "draw")
    assert {rec["metadata"]["game_idx"] for rec in draws} == {4}
    losses_draws = export(run_dir, "--outcome", "loss", "--outcome", "draw")
    assert len(wins) + len(losses_draws) == len(steps_of(results))
    evals = export(run_dir, "--kind", "eval")
    assert len(evals) == len(steps_of(results, kind="eval")) > 0
    assert {rec["metadata"]["game_idx"] for rec in evals} <= {4, 5}
    assert len(export(run_dir, "--kind", "train")) == len(steps_of(results, kind="train"))
    assert export(run_dir, "--env", "Nim-v0-train") == []
    assert len(export(run_dir, "--env", TTT)) == len(steps_of(results))
    assert len(export(run_dir, "--checkpoint", "1")) == len(steps_of(results))
    assert export(run_dir, "--checkpoint", "ckpt-2") == []
    base = export(run_dir, "--model", "base")
    assert len(base) == len(steps_of(results, model="base")) > 0
    assert {rec["metadata"]["model"] for rec in base} == {"base"}
    assert len(export(run_dir, "--model", "all")) == len(steps_of(results)) + len(base)


def test_raw_export_holds_token_ids_logprobs_and_rewards(played, tmp_path):
    run_dir, results, _ = played
    out = tmp_path / "raw.jsonl"
    result = CliRunner().invoke(cli, ["export", str(run_dir), "--format", "raw", "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    expected = steps_of(results)
    assert len(records) == len(expected) and f"exported {len(expected)} turns" in result.output
    by_key = {(r.info.game_idx, s.turn): s for r, _, s in expected}
    for rec in records:
        s = by_key[(rec["game_idx"], rec["turn"])]
        assert (rec["prompt"], rec["completion"]) == (s.obs, s.act)
        assert (rec["prompt_ids"], rec["completion_ids"], rec["logprobs"]) == (
            s.prompt_ids,
            s.completion_ids,
            s.logprobs,
        )
        assert (rec["reward"], rec["shaping"], rec["invalid_move"]) == (s.reward, s.shaping, s.invalid_move)


def test_prompts_of_the_named_templates_read_back_as_messages():
    obs = "You are Player 0.\nBoard: [1] [2]"
    for template in (qwen3_zs, gemma3_zs, llama_instruct_zs):
        messages = prompt_messages(template(obs))
        assert messages is not None and obs in messages[-1]["content"], template.__name__
        assert messages[-1]["role"] == "user"
    assert prompt_messages(llama_instruct_zs(obs))[0]["role"] == "system"
    api = [{"role": "user", "content": obs}]
    assert prompt_messages(MessagesTokenizer().apply_chat_template(api, tokenize=False)) == api  # API seat
    assert prompt_messages(qwen3_reasoning(obs)) is None  # ends inside <think>: not a plain chat prompt
    assert prompt_messages("no chat format at all") is None


def test_export_of_a_folder_that_is_no_run_says_so(tmp_path):
    result = CliRunner().invoke(cli, ["export", str(tmp_path)])
    assert result.exit_code == 2 and "has no games/games.jsonl" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("out", ["/proc/x.jsonl", "/sys/unstable-no-such-folder/x.jsonl"])
def test_an_out_file_that_cannot_be_written_is_one_line_before_the_run_is_read(played, tmp_path, out):
    """Before: PermissionError / FileNotFoundError tracebacks, after the whole run was read. Now: status 2,
    checked first (a folder that is no run is not even looked at)."""
    run_dir, _, _ = played
    for folder in (run_dir, tmp_path / "no-run"):
        result = CliRunner().invoke(cli, ["export", str(folder), "--out", out])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        (line,) = result.output.strip().splitlines()
        assert (
            line.startswith(f"Error: --out '{out}' cannot be written (") and "give a file in a folder" in line
        )


def test_a_cut_last_line_of_games_jsonl_is_skipped_with_a_warning(played, tmp_path):
    """A run killed while writing a game: before, its cut line was skipped without a word."""
    run_dir, results, _ = played
    cut = tmp_path / "cut"
    (cut / "games").mkdir(parents=True)
    text = (run_dir / "games" / "games.jsonl").read_text()
    lines = text.splitlines()
    (cut / "games" / "games.jsonl").write_text(
        "\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2]
    )
    result = CliRunner().invoke(cli, ["export", str(cut), "--out", str(tmp_path / "x.jsonl")])
    assert result.exit_code == 0, result.output
    assert (
        f"warning: skipped line {len(lines)} of {cut / 'games' / 'games.jsonl'}: not valid JSON (a line cut "
        "short when the run was killed)"
    ) in result.stderr
    kept = [r for r in results if r.info.game_idx != json.loads(lines[-1])["info"]["game_idx"]]
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == len(steps_of(kept)) > 0
