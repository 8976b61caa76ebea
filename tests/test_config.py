"""RunConfig: defaults, TOML + overrides, clear errors for bad values."""

from pathlib import Path

import pytest

from unstable_core.config import (
    DEFAULT_LORA_CFG,
    RunConfig,
    config_from_dict,
    load_config,
    parse_transform,
)
from unstable_core.envs.specs import eval_specs, task_specs, train_spec, train_specs
from unstable_core.errors import ConfigError


def test_defaults_are_valid_and_mirror_seats_learner_everywhere():
    cfg = RunConfig()
    (spec,) = train_specs(cfg)
    assert (spec.env_id, spec.num_players, spec.num_actors) == ("TicTacToe-v0-train", 2, 2)
    assert cfg.effective_buffer_size == 2 * cfg.batch_size and cfg.admission == "budget"  # the budget
    assert RunConfig(admission="drop").effective_buffer_size == 2 * cfg.batch_size


def test_env_strings():
    assert train_spec("Kuhn-v0:3", "default", mirror=False).num_actors == 1
    assert train_spec("Kuhn-v0:3:2", "t", mirror=False).num_actors == 2
    with pytest.raises(ConfigError, match="ENV_ID"):
        train_spec("Kuhn-v0:x", "default", mirror=True)
    with pytest.raises(ConfigError, match="ENV_ID"):  # the syntax is checked as the config is made
        RunConfig(train_envs=["Kuhn-v0:x"])
    with pytest.raises(ConfigError, match="num_actors must be between 1 and num_players"):
        train_spec("Kuhn-v0:2:3", "default", mirror=False)  # the counts, once the catalogue filled them in


def test_transform_strings():
    assert parse_transform("reward-for-format:reward=1.5,penalty=-1") == (
        "reward-for-format",
        {"reward": 1.5, "penalty": -1},
    )
    assert parse_transform({"name": "normalize", "z_score": True}) == ("normalize", {"z_score": True})


def test_group_relative_by_seed_needs_groups():
    with pytest.raises(ConfigError, match="every game is played once: add --env-sampler-config"):
        RunConfig(sampling_transforms=["group-relative"])
    RunConfig(sampling_transforms=["group-relative"], env_sampler_config={"repeat": 4})
    RunConfig(sampling_transforms=["group-relative:by=prompt"])


def test_toml_file_with_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('batch_size = 8\nlearning_rate = 0.001\nopponent_sampling_strategy = "lagged"\n')
    cfg = load_config(path, {"batch_size": 4, "mini_batch_size": None})
    assert (cfg.batch_size, cfg.learning_rate, cfg.sampler) == (4, 0.001, "lagged")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"learning_rate": 2.0}, "learning_rate must be > 0 and <= 1"),
        ({"bogus": 1}, "unknown config key 'bogus'"),
        ({"batch_size": 2, "mini_batch_size": 4}, "mini_batch_size"),
        ({"sampler": "fixed"}, "--fixed-opponent"),
        ({"lora_config": {"rank": 4}}, "unknown lora_config key.*rank"),
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

    from unstable_core.cli.main import cli

    out = CliRunner().invoke(cli, ["envs", "ultimatetictactoe"])
    assert out.exit_code == 0 and out.output.splitlines()[1:] == [
        "UltimateTicTacToe-v0        game  -        textarena",
        "UltimateTicTacToe-v0-train  game  -        textarena",
    ]
    assert out.output.split()[:5] == ["id", "kind", "players", "provided", "by"]
    bad = CliRunner().invoke(cli, ["envs", "zzz"])
    assert bad.exit_code == 2 and "no game or task id contains 'zzz'" in bad.output


def test_semantics_defaults_are_the_references():
    cfg = RunConfig()
    assert cfg.error_allowance == 0
    assert cfg.step_transforms == [
        "reward-for-format:reward=1.5,penalty=0.0",
        "penalty-for-invalid-move:reward=1.0,penalty=-1.0",
    ]
    assert cfg.sampling_transforms == ["normalize-by-env:z_score=true"]
    assert cfg.final_transforms == ["role-advantage-by-env"]


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["reference.toml", "spiral-kuhn-poker.toml"])
def test_example_configs_load_and_resolve(name, tmp_path):
    from unstable_core.runtime.launch.components import Components

    cfg = load_config(EXAMPLES / name, {"runs_dir": str(tmp_path)})
    comp = Components.resolve(cfg, tmp_path / "run")  # every component it names exists; Ray is not started
    assert comp.learner is not None and comp.model_sampler is not None
    learner = "reinforce" if name == "reference.toml" else "ppo"
    assert (cfg.backend, cfg.learner, cfg.sampler, cfg.error_allowance) == ("vllm", learner, "mirror", 0)
    assert cfg.prompt_template == "qwen3-zs" and cfg.vllm_config == {}
    if name == "reference.toml":
        assert cfg.model_name == "Qwen/Qwen3-1.7B-Base"
        assert (cfg.batch_size, cfg.mini_batch_size, cfg.learning_rate, cfg.gradient_clipping) == (
            384, 1, 1e-5, 0.2
        )  # fmt: skip
        assert (cfg.temperature, cfg.max_generation_len, cfg.max_batch_size, cfg.max_model_len) == (
            0.6, 4096, 128, 8192
        )  # fmt: skip
        assert (cfg.learning_steps, cfg.num_train_workers, cfg.num_eval_workers) == (200, 256, 16)
        assert cfg.effective_buffer_size == 768 and cfg.lora_config == DEFAULT_LORA_CFG
        assert [s.env_id for s in train_specs(cfg)] == ["SimpleTak-v0-train"]
        assert [s.env_id for s in eval_specs(cfg)] == ["SimpleTak-v0-train", "KuhnPoker-v0-train"]
        defaults = RunConfig()  # the reference's semantics are the defaults
        for stage in ("final", "step", "sampling"):
            assert getattr(cfg, f"{stage}_transforms") == getattr(defaults, f"{stage}_transforms")
        assert comp.final[0].ema_alpha == 0.999 and comp.sampling[0].z_score is True
        assert [(t.reward, t.penalty) for t in comp.step] == [(1.5, 0.0), (1.0, -1.0)]
    else:
        assert cfg.model_name == "Qwen/Qwen3-4B-Base"
        assert [(s.env_id, s.num_actors) for s in train_specs(cfg)] == [("KuhnPoker-v0-train", 2)]
        assert (cfg.batch_size, cfg.learning_rate, cfg.temperature, cfg.learning_steps) == (
            128,
            1e-6,
            1.0,
            400,
        )
        assert [type(t).__name__ for t in comp.final] == ["SpiralRAE"] and comp.final[0].ema_alpha == 0.95
        assert [(s.env_id, s.fixed_opponent) for s in eval_specs(cfg)] == [
            ("KuhnPoker-v0-train", "random"),  # SPIRAL: random, every 16 steps
            ("KuhnPoker-v0-train", "base"),
            ("TicTacToe-v0-train", "random"),  # out of domain
        ]
        assert [(s.env_id, s.num_players, s.prompt_template) for s in task_specs(cfg)] == [
            ("arithmetic-3", 1, "qwen3-reasoning")
        ]
        assert (cfg.eval_every, cfg.eval_games) == (16, 128)
        assert comp.step == [] and comp.sampling == []
        assert cfg.algorithm_config == {
            "clip_low": 0.2, "clip_high": 0.2, "epochs": 2, "mini_batches": 1,
            "kl_coef": 0.0, "entropy_coef": 0.0, "filter_zero_advantage": True,
        }  # fmt: skip
        from unstable_ppo.learner import PPOConfig  # SPIRAL's settings are valid ppo options

        assert PPOConfig(**cfg.algorithm_config).epochs == 2


def test_example_values_yield_to_the_command_line():
    cfg = load_config(
        EXAMPLES / "reference.toml", {"temperature": 0.9, "batch_size": 8, "mini_batch_size": 2}
    )
    assert (cfg.temperature, cfg.batch_size, cfg.max_batch_size) == (0.9, 8, 128)


def test_error_allowance_is_an_option_that_must_not_be_negative():
    assert load_config(None, {"error_allowance": 1}).error_allowance == 1
    with pytest.raises(ConfigError, match="error_allowance must be >= 0, got -1"):
        config_from_dict({"error_allowance": -1})


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('batch_size = "four"', "batch_size must be an integer, got the string 'four'"),
        ("batch_size = 4.5", "batch_size must be an integer, got the number 4.5"),
        ("batch_size = true", "batch_size must be an integer, got the boolean true"),
        ("batch_size = {n = 4}", "batch_size must be an integer, got a table"),
        ('gradient_checkpointing = "yes"', "gradient_checkpointing must be true or false"),
        ('train_envs = "TicTacToe-v0-train"', 'train_envs must be a list, got the string .*write \\["Tic'),
        ("trackers = [1]", "trackers: each item must be a string, got the number 1"),
        ('lora_config = "r=4"', "lora_config must be a table"),
        ('temperature = "hot"', "temperature must be a number"),
        ("learning_rate = 0", "learning_rate must be > 0"),
        ("gradient_clipping = 0", "gradient_clipping must be > 0"),
        ("buffer_size = 2\nbatch_size = 4\nmini_batch_size = 2", "buffer_size \\(2\\) must be >= batch_size \\(4\\)"),
    ],
)  # fmt: skip
def test_every_value_is_type_checked_at_load(tmp_path, toml, message):
    """A wrong type is one ConfigError naming the key (before: "'<' not supported", or accepted silently:
    4.5 steps, "yes" read as true, a string of env ids split into one env per letter)."""
    path = tmp_path / "run.toml"
    path.write_text(toml + "\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_int_for_a_float_and_tuples_for_lists_are_fine():
    cfg = config_from_dict({"learning_rate": 1, "train_envs": ("TicTacToe-v0-train",), "buffer_size": 16})
    assert cfg.learning_rate == 1 and cfg.batch_size <= cfg.effective_buffer_size


def test_a_non_utf8_file_is_one_error(tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes(b'run_name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_config(path)


@pytest.mark.parametrize("game", ["kuhn", "tictactoe"])
def test_the_strategy_recipes_load_and_resolve(game, tmp_path):
    """benchmarks/strategy.py trains these: every component they name exists and the local model runs them."""
    from unstable_core.runtime.launch.components import Components

    cfg = load_config(EXAMPLES / f"{game}-strategy.toml", {"runs_dir": str(tmp_path)})
    comp = Components.resolve(cfg, tmp_path / "run")
    assert comp.learner is not None and cfg.model_name == "smollm2-135m"
    assert cfg.sampler == {"kuhn": "mirror", "tictactoe": "fixed"}[game]  # Kuhn by self-play
    template = {"kuhn": "kuhn-compact", "tictactoe": "tictactoe-mine"}[game]
    assert cfg.prompt_template == template and cfg.learning_steps <= 200
