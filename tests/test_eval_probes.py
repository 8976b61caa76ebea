"""`unstable eval --probe`: bad probe arguments are one line naming the probes (exit 2) before anything
starts; probes alone run without Ray or games, print their table and write their figures to summary.json."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from unstable_core.cli.main import cli
from unstable_core.errors import UnstableError


def refused(*args: str) -> str:
    result = CliRunner().invoke(cli, ["eval", *args])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    return result.output


def test_bad_probe_arguments_are_one_line_naming_the_probes(tiny_model):
    known = "kuhn-exploitability (KuhnPoker), tictactoe-tactics (TicTacToe)"
    assert "Error: --probe bogus: unknown probe 'bogus'; the probes are: " in refused(
        tiny_model, "--probe", "bogus"
    )
    assert "'tictactoe-tactics:' is no probe: give NAME or NAME:ENV" in refused(
        tiny_model, "--probe", "tictactoe-tactics:"
    )
    assert known in refused(tiny_model, "--probe", "bogus")
    wrong_env = refused(tiny_model, "--probe", "kuhn-exploitability", "--env", "TicTacToe-v0-train")
    assert "probe 'kuhn-exploitability' cannot measure TicTacToe-v0-train" in wrong_env and known in wrong_env
    assert "cannot measure KuhnPoker-v0-train" in refused(
        tiny_model, "--probe", "tictactoe-tactics:KuhnPoker-v0-train"
    )
    assert "is not a game or task id" in refused(
        tiny_model, "--probe", "tictactoe-tactics:TicTacToe-v9-train"
    )
    assert "an API model does not give" in refused("openai:some-model", "--probe", "tictactoe-tactics")
    assert "opponent 'heuristic' cannot play KuhnPoker-v0-train" in refused(
        tiny_model, "--opponent", "heuristic", "--env", "KuhnPoker-v0-train"
    )


def test_probes_alone_print_their_table_and_write_summary_json(tiny_model, tmp_path):
    pytest.importorskip("pyspiel")
    out = tmp_path / "probes"
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            tiny_model,
            "--probe",
            "tictactoe-tactics",
            "--probe",
            "kuhn-exploitability",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "games:" not in result.output and not (out / "games").exists()  # no game was played
    rows = [line.split() for line in result.output.splitlines()]
    assert [tiny_model, "tictactoe-tactics", "TicTacToe-v0-train", "win_mass"] in [r[:4] for r in rows]
    (kuhn,) = [r for r in rows if r[3:4] == ["exploitability"]]
    assert kuhn[1:3] == ["kuhn-exploitability", "KuhnPoker-v0-short-train"]
    assert kuhn[5:] == ["(exact)", "12", "uniform", "0.458,", "nash", "0.000"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["probes"] == [
        {"probe": "tictactoe-tactics", "env_id": "TicTacToe-v0-train"},
        {"probe": "kuhn-exploitability", "env_id": "KuhnPoker-v0-short-train"},
    ]
    assert [(r["model"], r["probe"]) for r in summary["probe_results"]] == [
        (tiny_model, "tictactoe-tactics"),
        (tiny_model, "kuhn-exploitability"),
    ]
    figure = summary["probe_results"][1]["figures"]["exploitability"]
    assert set(figure) == {"value", "low", "high", "n", "exact"} and figure["n"] == 12
    assert summary["results"] == [] and summary["envs"] == []


def test_an_unreadable_checkpoint_is_named_by_its_file_and_leaves_no_folder(tiny_model, tmp_path):
    """A checkpoint whose adapter weights are damaged: `unstable eval` refuses it in one line naming the file
    before anything starts (status 2, no output folder), and a probe asked from Python names it too."""
    from unstable_core.eval.probes import run_probe
    from unstable_core.testing import make_tiny_adapter

    checkpoint = Path(make_tiny_adapter(tiny_model, tmp_path / "step-2", ["q_proj", "v_proj"]))
    weights = checkpoint / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    out = tmp_path / "evals" / "first"
    for args in (["--probe", "tictactoe-tactics"], ["--opponent", "random", "--games", "2"]):
        result = CliRunner().invoke(cli, ["eval", str(checkpoint), *args, "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert result.output.count("\n") == 1 and "Traceback" not in result.output
        assert f"cannot read {weights}: SafetensorError: " in result.output
        assert not (tmp_path / "evals").exists()
    with pytest.raises(
        UnstableError, match=f"^checkpoint {checkpoint}: cannot read {weights}: SafetensorError"
    ):
        run_probe("tictactoe-tactics", str(checkpoint), device="cpu")
