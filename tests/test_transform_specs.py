"""`+name` adds a reward transform to a stage's list (the defaults, or an earlier layer's) instead of
replacing it, and the pipeline a run reports."""

from __future__ import annotations

from pathlib import Path

from unstable_core.config import RunConfig, config_from_dict, load_config, merge_layers
from unstable_core.config.transforms import with_additions
from unstable_core.rewards.specs import pipeline, pipeline_text
from unstable_core.runtime.launch.components import Components

DEFAULT_STEP = RunConfig().step_transforms


def test_plus_entries_add_plain_ones_replace():
    assert with_additions(["a", "b"], ["+c:k=1"]) == ["a", "b", "c:k=1"]
    assert with_additions(["a"], ["+c", "+d"]) == ["a", "c", "d"]
    assert with_additions(["a"], ["c", "+d"]) == ["c", "d"]  # a plain entry: the given list is the list
    assert with_additions(["a"], []) == []  # `play` asks for no transforms at all
    assert with_additions(["a"], [{"name": "+c", "k": 1}]) == ["a", {"name": "c", "k": 1}]


def test_the_command_line_adds_to_the_defaults_or_to_the_file():
    assert load_config(None, {"step_transforms": ["+length"]}).step_transforms == [*DEFAULT_STEP, "length"]
    assert config_from_dict({"final_transforms": ["+bonus"]}).final_transforms == [
        "role-advantage-by-env",
        "bonus",
    ]
    layered = merge_layers({"step_transforms": ["mine"]}, {"step_transforms": ["+length"]})
    assert config_from_dict(layered).step_transforms == ["mine", "length"]
    assert load_config(None, {"step_transforms": ["length"]}).step_transforms == ["length"]


def test_the_file_adds_to_the_defaults(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('sampling_transforms = ["+normalize"]\n')
    cfg = load_config(toml)
    assert cfg.sampling_transforms == ["normalize-by-env:z_score=true", "normalize"]
    cfg.save(tmp_path / "config.toml")  # what a run writes: the whole list, no `+` left
    assert load_config(tmp_path / "config.toml").sampling_transforms == cfg.sampling_transforms


def test_the_pipeline_names_each_transform_with_its_options():
    cfg = load_config(
        None, {"final_transforms": ["+role-advantage:ema_alpha=0.9"], "sampling_transforms": []}
    )
    stages = pipeline(cfg, Components.resolve(cfg, Path("unused")))
    assert stages == {
        "final": ["role-advantage-by-env(ema_alpha=0.999)", "role-advantage(ema_alpha=0.9)"],
        "step": [
            "reward-for-format(reward=1.5, penalty=0.0)",
            "penalty-for-invalid-move(reward=1.0, penalty=-1.0)",
        ],
        "sampling": [],
    }
    assert pipeline(cfg)["final"] == [
        "role-advantage-by-env",
        "role-advantage(ema_alpha=0.9)",
    ]  # unbuilt: as given
    assert pipeline_text(stages).endswith(" -> sampling -")
