"""examples/reference.toml: every option, with its help, generated from the code (`unstable_core.config.reference`,
written by `python -m unstable_core.cli.reference`) and kept current here."""

import re
from pathlib import Path

import attrs
import pytest

from unstable_core.cli.reference import installed_learners, installed_reference, main
from unstable_core.config import RunConfig, load_config, tomllib
from unstable_core.config.reference import COMMAND, reference_toml
from unstable_core.registry import KNOWN_PROVIDERS

REFERENCE = Path(__file__).resolve().parents[1] / "examples" / "reference.toml"


@pytest.fixture(scope="module")
def learners():
    found = installed_learners()
    if {learner.name for learner in found} != set(KNOWN_PROVIDERS["learner"]):
        pytest.skip("the file lists this repository's learners; install exactly those (plugins/) to compare")
    return found


def test_the_committed_file_is_what_the_code_generates(learners):
    assert REFERENCE.read_text(encoding="utf-8") == installed_reference(), f"regenerate it: {COMMAND}"


def test_check_names_a_stale_file(learners, tmp_path, capsys):
    assert main(["--check", str(REFERENCE)]) == 0
    stale = tmp_path / "reference.toml"
    stale.write_text(REFERENCE.read_text(encoding="utf-8").replace("batch_size = 384", "batch_size = 8"))
    assert main(["--check", str(stale)]) == 1
    assert COMMAND in capsys.readouterr().err


def test_every_run_option_is_there_with_its_help_in_its_group():
    text = reference_toml([], ["gpu_memory_utilization"])
    for field in attrs.fields(RunConfig):
        key = re.compile(rf"^(# )?{field.name}( =|\.)", re.MULTILINE)
        assert key.search(text), f"{field.name} is missing"
        first_words = " ".join(field.metadata["help"].split()[:4])
        assert f"# {first_words}" in text, f"{field.name}'s help is missing"
    sections = [f.metadata["section"] for f in attrs.fields(RunConfig) if "section" in f.metadata]
    assert [line[7:] for line in text.splitlines() if line.startswith("# ---- ")][: len(sections)] == sections
    assert "no API backend" not in text and "openai:google/gemini-2.0-flash-lite-001" in text


def test_the_file_loads_as_the_references_run():
    cfg = load_config(REFERENCE)
    defaults = RunConfig()
    assert (cfg.model_name, cfg.batch_size, cfg.backend, cfg.gradient_checkpointing) == (
        "Qwen/Qwen3-1.7B-Base", 384, "vllm", True
    )  # fmt: skip
    assert (cfg.top_p, cfg.max_turns, cfg.seed) == (defaults.top_p, defaults.max_turns, defaults.seed)


def test_each_learners_commented_options_are_its_defaults(learners):
    """Uncommenting a learner's block gives exactly its defaults, which it accepts."""
    text = REFERENCE.read_text(encoding="utf-8")
    for learner in learners:
        name, config_cls = learner.name, learner.config_class
        if config_cls is None:
            assert f"# {name}: no options" in text
            continue
        block = text.split(f'# {name} (learner = "{name}")', 1)[1].split("\n\n", 1)[0]
        options = [line[2:] for line in block.splitlines() if line.startswith("# algorithm_config.")]
        data = tomllib.loads("\n".join(o for o in options if not o.endswith("(null)")))
        assert config_cls(**data["algorithm_config"]) == config_cls()
        assert len(options) == len(attrs.fields(config_cls))
