"""A resume whose last checkpoint does not load: its files are read before anything starts, the newest
checkpoint that loads is chosen and the newer ones set aside, the logs are rolled back to it; none loading
is one line naming the file (real checkpoints of the tiny model's learner, real files)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from unstable_core.config import RunConfig
from unstable_core.errors import ConfigError
from unstable_core.io import append_jsonl, read_jsonl
from unstable_core.learners.checkpoint import checkpoint_problem
from unstable_core.runtime.recovery.resume import SavedRun, prepare_logs
from unstable_core.runtime.run_dir import RUN_STATE, checkpoint_steps

HEADER_TOO_LARGE = "Error while deserializing header: header too large (SafetensorError)"


def save_run(tiny_model: str, run_dir: Path, steps: int) -> None:
    """A run folder with `steps` real checkpoints of the REINFORCE learner (no Ray), and its config."""
    from unstable_reinforce.learner import REINFORCELearner

    lora = {"lora_rank": 4, "lora_alpha": 8}
    RunConfig(model_name=tiny_model, learning_steps=steps + 2, lora_config=lora).save(run_dir / "config.toml")
    learner = REINFORCELearner.create(tiny_model, device="cpu", run_dir=run_dir, lora_config=lora)
    learner.initialize_algorithm()
    for k in range(1, steps + 1):
        learner.step = k
        state = {"league": {"models": []}, "metrics": {"learner/loss": float(k)}}
        learner.save_checkpoint(extra_json={RUN_STATE: state})


def corrupt_header(path: Path) -> None:
    """A safetensors file whose header length is absurd, as the issue's damaged adapter had."""
    raw = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 1 << 40) + raw[8:])


@pytest.fixture(scope="module")
def saved(tiny_model, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("saved") / "r"
    folder.mkdir()
    save_run(tiny_model, folder, 3)
    return folder


def find_resume_point(run_dir: Path, **overrides):
    """The checkpoint a resume of `run_dir` goes on from (as `Run.resume` reads it, under no lock here)."""
    return SavedRun.read(run_dir, overrides).resume_point()


def copy_of(saved: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(saved, tmp_path / "r"))


def test_a_checkpoint_problem_names_the_file_that_does_not_load(saved, tmp_path):
    run_dir = copy_of(saved, tmp_path)
    folder = run_dir / "checkpoints" / "step-1"
    assert checkpoint_problem(folder) is None
    corrupt_header(folder / "adapter_model.safetensors")
    assert checkpoint_problem(folder) == f"{folder / 'adapter_model.safetensors'}: {HEADER_TOO_LARGE}"

    folder = run_dir / "checkpoints" / "step-2"
    adapter = folder / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:-4])  # its last tensor cut short
    assert checkpoint_problem(folder) == (
        f"{adapter}: Error while deserializing header: incomplete metadata, file not fully covered "
        "(SafetensorError)"
    )

    folder = run_dir / "checkpoints" / "step-3"
    optimizer = folder / "optimizer.safetensors"
    saved_bytes = optimizer.read_bytes()
    optimizer.write_bytes(b"not a safetensors file")
    assert checkpoint_problem(folder) == f"{optimizer}: {HEADER_TOO_LARGE}"
    optimizer.write_bytes(saved_bytes)
    extra = folder / "critic"  # an algorithm's extras (A2C's critic/) are read as well
    extra.mkdir()
    (extra / "value_head.safetensors").write_bytes(b"")
    assert checkpoint_problem(folder).startswith(f"{extra / 'value_head.safetensors'}: ")
    (extra / "value_head.safetensors").unlink()
    (folder / "learner_state.json").write_text('{"step": 3,')
    assert checkpoint_problem(folder).startswith(f"{folder / 'learner_state.json'}: Expecting")
    (folder / "learner_state.json").unlink()
    assert checkpoint_problem(folder) == f"{folder / 'learner_state.json'} is missing"


def test_a_resume_falls_back_to_the_newest_checkpoint_that_loads(saved, tmp_path):
    run_dir = copy_of(saved, tmp_path)
    for k in (2, 3):
        corrupt_header(run_dir / "checkpoints" / f"step-{k}" / "adapter_model.safetensors")
    # the run is not complete at step 3: that checkpoint does not load
    point = find_resume_point(run_dir, learning_steps=3)
    assert (point.step, point.checkpoint) == (1, run_dir / "checkpoints" / "step-1")
    assert [(s.step, s.kept_as) for s in point.skipped] == [
        (3, "step-3.unreadable"),
        (2, "step-2.unreadable"),
    ]
    assert checkpoint_steps(run_dir) == [1]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step-1", "step-2.unreadable", "step-3.unreadable",
    ]  # fmt: skip
    assert point.fallback_line() == (
        f"checkpoint step 3 does not load ({run_dir}/checkpoints/step-3/adapter_model.safetensors: "
        f"{HEADER_TOO_LARGE}), nor step 2: resuming from step 1, the newest that does; set aside as "
        "checkpoints/step-3.unreadable, checkpoints/step-2.unreadable"
    )
    assert point.steps == [1]
    assert find_resume_point(run_dir).skipped == []  # set aside: the next resume starts at step 1 quietly


def test_a_complete_run_is_refused_with_nothing_set_aside(saved, tmp_path):
    """Step 3 does not load, so the run is done at step 2: refused, and step 3 stays where it was."""
    run_dir = copy_of(saved, tmp_path)
    corrupt_header(run_dir / "checkpoints" / "step-3" / "adapter_model.safetensors")
    with pytest.raises(ConfigError) as refused:
        find_resume_point(run_dir, learning_steps=2)
    assert str(refused.value) == (
        f"--resume {run_dir}: the run is complete (learner step 2 of 2): to train it further, give more "
        f"steps, e.g. `unstable run --resume {run_dir} --learning-steps 4`"
    )
    assert checkpoint_steps(run_dir) == [1, 2, 3]


def test_a_resume_reads_the_run_directory_once(saved, tmp_path, monkeypatch):
    """Before: the checkpoints were listed and read before the lock, again under it, and listed a third
    time to restore metrics: a resume now lists them once and reads each checkpoint it tries once."""
    from unstable_core.runtime.recovery import resume
    from unstable_core.runtime.run import Run

    run_dir = copy_of(saved, tmp_path)
    corrupt_header(run_dir / "checkpoints" / "step-3" / "adapter_model.safetensors")
    calls: list[str] = []
    listed, read = resume.checkpoint_steps, resume.checkpoint_problem
    monkeypatch.setattr(resume, "checkpoint_steps", lambda *a, **k: calls.append("list") or listed(*a, **k))
    monkeypatch.setattr(
        resume, "checkpoint_problem", lambda folder, *a: calls.append(Path(folder).name) or read(folder, *a)
    )
    run = Run.resume(run_dir)
    try:
        record = run._open_logs()
    finally:
        run.lock.release()
    assert calls == ["list", "step-3", "step-2"]
    assert record["resumed_from_step"] == 2 and record["metrics_restored_steps"] == [1, 2]


def test_a_resume_where_no_checkpoint_loads_is_one_line_naming_the_file(saved, tmp_path):
    run_dir = copy_of(saved, tmp_path)
    for k in (1, 2, 3):
        corrupt_header(run_dir / "checkpoints" / f"step-{k}" / "adapter_model.safetensors")
    expected = (
        f"--resume {run_dir}: no checkpoint of the run loads: {run_dir}/checkpoints/step-3/"
        f"adapter_model.safetensors: {HEADER_TOO_LARGE} (nor do the 2 older ones); restore that file from a "
        "copy, or start a new run"
    )
    with pytest.raises(ConfigError) as refused:
        find_resume_point(run_dir)
    assert str(refused.value) == expected
    assert checkpoint_steps(run_dir) == [1, 2, 3]  # nothing set aside


def game(idx: int, *models: str) -> dict:
    return {"info": {"game_idx": idx, "models": dict(enumerate(models))}, "trajectories": []}


def test_the_logs_roll_back_to_the_checkpoint_resumed_from(saved, tmp_path):
    """The metrics of steps 2 and 3 and the games ckpt-2 and ckpt-3 played move to *.rolled-back.jsonl:
    the resumed run trains steps 2 and 3 again, and `ckpt-2` must not be two policies in the logs."""
    run_dir = copy_of(saved, tmp_path)
    for k in (2, 3):
        corrupt_header(run_dir / "checkpoints" / f"step-{k}" / "adapter_model.safetensors")
    metrics = [
        *({"step": k, "learner/loss": float(k)} for k in (1, 2, 3)),
        {"step": 2, "eval/TicTacToe-v0/vs_base/win_rate": 0.5},
        {"event": "stopped", "games_recorded": 5},
    ]
    append_jsonl(run_dir / "metrics.jsonl", metrics)
    games = [game(0, "ckpt-0", "ckpt-0"), game(1, "ckpt-1", "base"), game(2, "ckpt-2", "ckpt-1"),
             game(3, "ckpt-1", "ckpt-1"), game(4, "ckpt-3", "random")]  # fmt: skip
    append_jsonl(run_dir / "games" / "games.jsonl", games)
    with open(run_dir / "games" / "games.jsonl", "a") as f:
        f.write('{"info": {"game_idx": 9, "models"')  # a line a crash cut short: it stays

    record = prepare_logs(find_resume_point(run_dir), run_dir, {})
    kept = read_jsonl(run_dir / "metrics.jsonl")
    assert kept == [metrics[0], metrics[-1]]
    assert read_jsonl(run_dir / "metrics.rolled-back.jsonl") == metrics[1:4]
    assert [g["info"]["game_idx"] for g in read_jsonl(run_dir / "games" / "games.jsonl")] == [0, 1, 3]
    assert [g["info"]["game_idx"] for g in read_jsonl(run_dir / "games" / "games.rolled-back.jsonl")] == [
        2,
        4,
    ]
    assert (run_dir / "games" / "games.jsonl").read_text().endswith('"models"\n')
    assert record["resumed_from_step"] == 1 and record["next_game_index"] == 5  # after every game played
    assert record["rolled_back_lines"] == {"metrics.jsonl": 3, "games/games.jsonl": 2}
    assert [s["step"] for s in record["skipped_checkpoints"]] == [3, 2]
    assert json.loads(json.dumps(record)) == record


def test_a_resume_from_the_last_checkpoint_rewrites_no_log(saved, tmp_path):
    run_dir = copy_of(saved, tmp_path)
    append_jsonl(run_dir / "metrics.jsonl", [{"step": k, "learner/loss": 1.0} for k in (1, 2, 3)])
    append_jsonl(run_dir / "games" / "games.jsonl", [game(0, "ckpt-3", "ckpt-3")])
    before = {p: p.stat().st_ino for p in (run_dir / "metrics.jsonl", run_dir / "games" / "games.jsonl")}
    record = prepare_logs(find_resume_point(run_dir), run_dir, {})
    assert record["resumed_from_step"] == 3 and "skipped_checkpoints" not in record
    assert {p: p.stat().st_ino for p in before} == before  # appended to, never rewritten
    assert not (run_dir / "metrics.rolled-back.jsonl").exists()


def test_optimizer_states_are_kept_in_the_newest_checkpoints_only(saved, tmp_path):
    from safetensors import safe_open

    from unstable_core.learners.checkpoint import OPTIMIZER_FILE, prune_optimizer_states

    run_dir = copy_of(saved, tmp_path)
    checkpoints = run_dir / "checkpoints"
    weights = [checkpoints / f"step-{k}" / "adapter_model.safetensors" for k in (1, 2, 3)]
    sizes = [w.stat().st_size for w in weights]
    removed = prune_optimizer_states(checkpoints, keep=2)
    assert removed == [checkpoints / "step-1" / OPTIMIZER_FILE, weights[0]]
    kept = [k for k in (1, 2, 3) if (checkpoints / f"step-{k}" / OPTIMIZER_FILE).is_file()]
    assert kept == [2, 3]
    dtypes = []
    for w in weights:
        with safe_open(str(w), framework="pt", device="cpu") as f:
            dtypes.append({str(f.get_tensor(key).dtype) for key in f.keys()})  # noqa: SIM118
    assert dtypes == [{"torch.bfloat16"}, {"torch.float32"}, {"torch.float32"}]
    assert weights[0].stat().st_size < 0.6 * sizes[0] and [w.stat().st_size for w in weights[1:]] == sizes[1:]
    assert checkpoint_problem(checkpoints / "step-1") is None  # an adapter without its optimizer loads
    assert prune_optimizer_states(checkpoints, keep=2) == []  # done once


def test_compact_adapters_off_keeps_float32(saved, tmp_path):
    from unstable_core.learners.checkpoint import prune_optimizer_states

    run_dir = copy_of(saved, tmp_path)
    weights = run_dir / "checkpoints" / "step-1" / "adapter_model.safetensors"
    before = weights.read_bytes()
    prune_optimizer_states(run_dir / "checkpoints", keep=2, compact_adapters=False)
    assert weights.read_bytes() == before


def test_a_bfloat16_adapter_plays_as_its_float32_original(tiny_model, tmp_path):
    """A compacted adapter (random B, so that it moves the policy) moves log-probs by under 5% of what the
    float32 adapter moves them from the base model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from unstable_core.learners.checkpoint import compact_adapter
    from unstable_core.testing import make_tiny_adapter, plain_logprobs

    folder = Path(make_tiny_adapter(tiny_model, tmp_path / "a", ["q_proj", "v_proj"], seed=3))
    prompt, completion = list(range(5, 40)), list(range(40, 48))

    def logprobs(adapter: Path | None) -> list[float]:
        model = AutoModelForCausalLM.from_pretrained(tiny_model)
        if adapter is not None:
            model = PeftModel.from_pretrained(model, str(adapter))
        return plain_logprobs(model.eval(), prompt, completion)

    base, full = logprobs(None), logprobs(folder)
    assert compact_adapter(folder / "adapter_model.safetensors")
    half = logprobs(folder)
    moved, rounded = (max(abs(a - b) for a, b in zip(full, other, strict=True)) for other in (base, half))
    assert moved > 0.2 and rounded < 0.05 * moved, (moved, rounded)


def test_a_resume_without_optimizer_state_starts_the_optimizer_fresh_and_says_so(saved, tiny_model, tmp_path):
    from unstable_reinforce.learner import REINFORCELearner

    from unstable_core.learners.checkpoint import prune_optimizer_states

    run_dir = copy_of(saved, tmp_path)
    prune_optimizer_states(run_dir / "checkpoints", keep=1)
    for k in (2, 3):  # the newest two do not load: the resume falls back to step 1, which kept no optimizer
        corrupt_header(run_dir / "checkpoints" / f"step-{k}" / "adapter_model.safetensors")
    point = find_resume_point(run_dir)
    assert point.step == 1
    assert "kept no optimizer state" in point.optimizer_line() and "starts fresh" in point.optimizer_line()
    learner = REINFORCELearner.create(
        tiny_model, device="cpu", run_dir=run_dir, lora_config={"lora_rank": 4, "lora_alpha": 8}
    )
    learner.initialize_algorithm()
    learner.load_checkpoint(point.checkpoint)
    assert learner.step == 1 and learner.optimizer_fresh


def test_keep_optimizer_states_zero_is_refused_in_one_line():
    from click.testing import CliRunner

    from unstable_core.cli.main import cli

    result = CliRunner().invoke(cli, ["run", "--keep-optimizer-states", "0"])
    assert result.exit_code == 2, result.output
    assert "keep_optimizer_states must be >= 1, got 0" in result.output
    assert "Traceback" not in result.output
