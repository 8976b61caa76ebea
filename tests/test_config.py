"""RunConfig: defaults, TOML + overrides, clear errors for bad values."""

import pytest

from unstable_core.config import RunConfig, config_from_dict, load_config, parse_env, parse_transform
from unstable_core.errors import ConfigError


def test_defaults_are_valid_and_mirror_seats_learner_everywhere():
    cfg = RunConfig()
    (spec,) = cfg.train_specs()
    assert (spec.env_id, spec.num_players, spec.num_actors) == ("TicTacToe-v0-train", 2, 2)
    assert cfg.effective_buffer_size == 2 * cfg.batch_size


def test_env_strings():
    assert parse_env("Kuhn-v0:3", "default", mirror=False).num_actors == 1
    assert parse_env("Kuhn-v0:3:2", "t", mirror=False).num_actors == 2
    with pytest.raises(ConfigError, match="ENV_ID"):
        parse_env("Kuhn-v0:x", "default", mirror=True)


def test_transform_strings():
    assert parse_transform("reward-for-format:reward=1.5,penalty=-1") == (
        "reward-for-format",
        {"reward": 1.5, "penalty": -1},
    )
    assert parse_transform({"name": "normalize", "z_score": True}) == ("normalize", {"z_score": True})


def test_toml_file_with_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('batch_size = 8\nlearning_rate = 0.001\nopponent_sampling_strategy = "lagged"\n')
    cfg = load_config(path, {"batch_size": 4, "mini_batch_size": None})
    assert (cfg.batch_size, cfg.learning_rate, cfg.sampler) == (4, 0.001, "lagged")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"learning_rate": 2.0}, "learning_rate must be between"),
        ({"bogus": 1}, "unknown config key 'bogus'"),
        ({"batch_size": 2, "mini_batch_size": 4}, "mini_batch_size"),
        ({"sampler": "fixed"}, "--fixed-opponent"),
        ({"lora_config": {"rank": 4}}, "lora_config: unknown key"),
    ],
)
def test_bad_values_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


def test_missing_or_broken_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("batch_size = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_save_round_trip(tmp_path):
    cfg = RunConfig(batch_size=8, fixed_opponents=["base"], sampler="fixed")
    cfg.save(tmp_path / "config.toml")
    assert load_config(tmp_path / "config.toml") == cfg


def test_envs_command_lists_textarena_ids_and_rejects_an_unknown_pattern():
    from click.testing import CliRunner

    from unstable_core.cli import cli

    out = CliRunner().invoke(cli, ["envs", "ultimatetictactoe"])
    assert out.exit_code == 0 and out.output.split() == ["UltimateTicTacToe-v0", "UltimateTicTacToe-v0-train"]
    bad = CliRunner().invoke(cli, ["envs", "zzz"])
    assert bad.exit_code == 2 and "no TextArena environment id contains 'zzz'" in bad.output


def test_reference_build_values_are_accepted():
    cfg = config_from_dict(
        {
            "model_name": "m",
            "opponent_sampling_strategy": "none",
            "lora_config": None,
            "eval_envs": None,
            "fixed_opponents": None,
            "max_train_len": None,
            "vllm_config": {
                "model_name": "m",
                "temperature": 0.6,
                "max_tokens": 256,
                "max_parallel_seq": 128,
                "max_loras": 8,
                "lora_config": {"lora_rank": 8},
                "max_model_len": 8192,
            },
        }
    )
    assert cfg.sampler == "mirror" and cfg.eval_envs == [] and cfg.fixed_opponents == []
    assert (cfg.temperature, cfg.max_generation_len, cfg.max_batch_size, cfg.max_model_len) == (
        0.6,
        256,
        128,
        8192,
    )
    assert cfg.lora_config["lora_rank"] == 8 and cfg.vllm_config == {}
    with pytest.raises(ConfigError, match="vllm_config.model_name"):
        config_from_dict({"model_name": "a", "vllm_config": {"model_name": "b"}})


def test_semantics_defaults_are_the_references():
    cfg = RunConfig()
    assert cfg.error_allowance == 0
    assert cfg.step_transforms == [
        "reward-for-format:reward=1.5,penalty=0.0",
        "penalty-for-invalid-move:reward=1.0,penalty=-1.0",
    ]
    assert cfg.sampling_transforms == ["normalize-by-env:z_score=true"]
    assert cfg.final_transforms == ["role-advantage-by-env"]


@pytest.mark.parametrize("name", ["reference.toml", "spiral-kuhn-poker.toml"])
def test_example_configs_load_and_resolve(name, tmp_path):
    from pathlib import Path

    from unstable_core.runtime.run import Components

    path = Path(__file__).resolve().parents[1] / "examples" / name
    cfg = load_config(path, {"runs_dir": str(tmp_path)})
    comp = Components.resolve(cfg, tmp_path / "run")
    assert comp.learner is not None and comp.model_sampler is not None
    if name == "reference.toml":
        assert (cfg.batch_size, cfg.learning_rate, cfg.temperature, cfg.max_model_len) == (
            384,
            1e-5,
            0.6,
            8192,
        )
        assert cfg.sampler == "mirror" and cfg.backend == "vllm" and len(cfg.eval_specs()) == 2
    else:
        assert cfg.train_specs()[0].env_id == "KuhnPoker-v0-train" and cfg.temperature == 1.0
        assert [type(t).__name__ for t in comp.final] == ["SpiralRAE"] and comp.final[0].ema_alpha == 0.95
