"""add_config_argument(s): a benchmark's argparse options that mirror RunConfig take their help, type, default
and check from its fields, and a bad value ends in argparse's one-line error, exit 2."""

import argparse

import attrs
import pytest

from unstable_core.cli.options import add_config_argument, add_config_arguments
from unstable_core.config import RunConfig


def parser_with(*flags: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench")
    add_config_arguments(parser, *flags)
    return parser


def refusal(parser: argparse.ArgumentParser, argv: list[str], capsys) -> str:
    """The error line of a refused command line (its exit status is argparse's 2)."""
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_every_field_parses_to_the_run_default():
    parser = argparse.ArgumentParser()
    for field in attrs.fields(RunConfig):
        flag = field.metadata.get("cli") or "--" + field.name.replace("_", "-")
        add_config_argument(parser, flag, dest=field.name)
    assert "steps per learner update" in parser.format_help()  # every help formats ('%' escaped)
    given = {k: v for k, v in vars(parser.parse_args([])).items() if v is not None}
    assert RunConfig(**given) == RunConfig()  # lists not given are None: the run's default applies


def test_an_option_takes_the_fields_help_type_default_and_check(capsys):
    parser = parser_with("--batch-size", "--temperature", "--admission", "--template")
    help_text = " ".join(parser.format_help().split())
    assert "steps per learner update" in help_text and "(default: 16)" in help_text
    args = parser.parse_args(["--batch-size", "3", "--temperature", "0.5"])
    assert (args.batch_size, args.temperature, args.admission, args.template) == (3, 0.5, "budget", "move")
    assert "argument --batch-size: batch_size must be >= 1, got 0" in refusal(
        parser, ["--batch-size", "0"], capsys
    )
    assert "argument --batch-size: expected an integer, got 'x'" in refusal(
        parser, ["--batch-size", "x"], capsys
    )
    assert "admission must be one of" in refusal(parser, ["--admission", "some"], capsys)


def test_a_benchmarks_own_flag_and_default(capsys):
    parser = argparse.ArgumentParser(prog="bench")
    add_config_argument(parser, "--train-workers", "num_train_workers")
    add_config_argument(parser, "--max-steps", "learning_steps", default=500)
    assert vars(parser.parse_args([])) == {"train_workers": 8, "max_steps": 500}
    assert parser.parse_args(["--train-workers", "2"]).train_workers == 2
    assert "num_train_workers must be >= 1" in refusal(parser, ["--train-workers", "0"], capsys)
    with pytest.raises(ValueError, match="--train-workers is no option of `unstable run`"):
        add_config_argument(parser, "--train-workers")


def test_lists_repeat_dicts_are_json_and_bools_pair(capsys):
    parser = parser_with("--fixed-opponent", "--algorithm-config", "--gradient-checkpointing")
    args = parser.parse_args([])
    assert (args.fixed_opponent, args.algorithm_config, args.gradient_checkpointing) == (None, {}, False)
    argv = ["--fixed-opponent", "base", "--fixed-opponent", "random", "--algorithm-config", '{"k": 2}']
    args = parser.parse_args([*argv, "--gradient-checkpointing"])
    assert (args.fixed_opponent, args.algorithm_config, args.gradient_checkpointing) == (
        ["base", "random"],
        {"k": 2},
        True,
    )
    assert parser.parse_args(["--no-gradient-checkpointing"]).gradient_checkpointing is False
    assert "not valid JSON" in refusal(parser, ["--algorithm-config", "{k"], capsys)
    assert "expected a JSON object" in refusal(parser, ["--algorithm-config", "[1]"], capsys)
