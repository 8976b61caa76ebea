"""UnstableBaselines v0.2 compatibility (`unstable_core.config.unstable_baselines`): its build() names and
values, its vllm_config, and files written before its names left RunConfig, which must still load and resume
(tests/fixtures: a TOML file and a run directory written at 7a23685, see tests/fixtures/README.md)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from unstable_core.config import DEFAULT_LORA_CFG, RunConfig, config_from_dict, load_config, merge_layers
from unstable_core.config import unstable_baselines as ub
from unstable_core.config.unstable_baselines import map_vllm_config
from unstable_core.envs.specs import eval_specs, train_specs
from unstable_core.errors import ConfigError, UnstableError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OLD_RUN = FIXTURES / "run-7a23685"
OLD_TOML = FIXTURES / "reference-7a23685.toml"
REFERENCE_CFG = {
    "model_name": "Qwen/Qwen3-1.7B-Base",
    "temperature": 0.6,
    "max_tokens": 4096,
    "max_parallel_seq": 128,
    "max_loras": 8,
    "lora_config": {
        "lora_rank": 32,
        "lora_alpha": 32,
        "lora_dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"],
    },
    "max_model_len": 8192,
}


def test_the_tables_name_only_runconfig_fields_and_runconfig_has_none_of_the_old_names():
    fields = attrs.fields_dict(RunConfig)
    assert set(ub.RENAMED.values()) <= set(fields) and set(ub.VALUES) <= set(fields)
    assert set(ub.VLLM_CONFIG_FIELDS.values()) <= set(fields) and set(fields) >= ub.EITHER_TURNS_ON
    assert not (set(ub.RENAMED) | set(ub.IGNORED)) & set(fields)
    assert not [f.name for f in fields.values() if f.converter is not None or "alias" in f.metadata]


def test_runconfig_itself_takes_only_its_own_names_and_values():
    with pytest.raises(ConfigError, match="eval_envs must be a list, got NoneType None"):
        RunConfig(eval_envs=None)
    with pytest.raises(TypeError, match="activation_checkpointing"):
        RunConfig(activation_checkpointing=True)
    cfg = config_from_dict(
        {
            "sampler": "none",
            "lora_config": None,
            "eval_envs": None,
            "fixed_opponents": None,
            "vllm_config": None,
        }
    )
    assert (cfg.sampler, cfg.eval_envs, cfg.fixed_opponents, cfg.vllm_config) == ("mirror", [], [], {})
    assert cfg.lora_config == DEFAULT_LORA_CFG


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"algorithm": "a2c"}, {"learner": "a2c"}),
        ({"env_sampling_strategy": "random"}, {"env_sampler": "random"}),
        ({"opponent_sampling_strategy": "none"}, {"sampler": "mirror"}),
        ({"num_collection_workers": 3}, {"num_train_workers": 3}),
        ({"use_trainer_cache": True, "max_train_len": None}, {}),
        ({"activation_checkpointing": True}, {"gradient_checkpointing": True}),
        ({"activation_checkpointing": True, "gradient_checkpointing": False}, {"gradient_checkpointing": True}),
        ({"activation_checkpointing": False, "gradient_checkpointing": False}, {"gradient_checkpointing": False}),
        ({"learner": "ppo", "algorithm": "ppo"}, {"learner": "ppo"}),
    ],
)  # fmt: skip
def test_one_layer_in_runconfigs_names(old, new):
    assert ub.translate(old) == new


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"learner": "ppo", "algorithm": "a2c"}, "learner = 'ppo' and algorithm = 'a2c' both set learner; give one"),
        ({"activation_checkpointing": "yes"}, "activation_checkpointing must be true or false, got 'yes'"),
        ({"num_collection_workers": 0}, "num_train_workers must be >= 1"),
        ({"bogus": None}, "unknown config key 'bogus'"),
    ],
)  # fmt: skip
def test_old_names_are_checked_as_their_fields_are(data, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


def test_a_later_layer_beats_an_earlier_one_whatever_the_spelling():
    merged = merge_layers({"algorithm": "a2c", "activation_checkpointing": True}, {"learner": "ppo"})
    assert merged == {"learner": "ppo", "gradient_checkpointing": True}
    assert merge_layers({"num_train_workers": 2}, {"num_collection_workers": 5}) == {"num_train_workers": 5}
    assert config_from_dict(
        merge_layers({"activation_checkpointing": True}, {"gradient_checkpointing": False})
    )


def test_a_toml_file_written_at_7a23685_in_the_references_spelling_loads():
    cfg = load_config(OLD_TOML)
    assert (cfg.learner, cfg.env_sampler, cfg.sampler, cfg.num_train_workers) == (
        "reinforce",
        "random",
        "mirror",
        256,
    )
    assert cfg.gradient_checkpointing is True and cfg.vllm_config == {}
    assert (cfg.temperature, cfg.max_generation_len, cfg.max_batch_size, cfg.max_loras, cfg.max_model_len) == (
        0.6, 4096, 128, 8, 8192
    )  # fmt: skip
    assert (cfg.batch_size, cfg.learning_steps, cfg.backend) == (384, 200, "vllm")
    assert load_config(OLD_TOML, {"temperature": 0.9, "num_train_workers": 8}).num_train_workers == 8


def test_the_config_of_a_run_directory_written_at_7a23685_loads(tmp_path):
    from unstable_core.runtime.recovery.resume import SavedRun

    text = (OLD_RUN / "config.toml").read_text()
    assert "activation_checkpointing = false" in text and "use_trainer_cache = false" in text
    cfg = load_config(OLD_RUN / "config.toml")
    assert (cfg.model_name, cfg.learner, cfg.sampler, cfg.learning_steps, cfg.gradient_checkpointing) == (
        "tiny-model", "reinforce", "mirror", 1, False
    )  # fmt: skip
    assert cfg.lora_config == {**DEFAULT_LORA_CFG, "lora_rank": 4, "lora_alpha": 8}
    run_dir = shutil.copytree(OLD_RUN, tmp_path / "old7a")
    saved = SavedRun.read(run_dir, {"learning_steps": 2})
    assert saved.changed == {"learning_steps": [1, 2]} and saved.cfg == attrs.evolve(cfg, learning_steps=2)
    point = saved.resume_point()
    assert (point.step, point.steps, point.skipped) == (1, [1], [])


@pytest.mark.slow
def test_a_run_directory_written_at_7a23685_resumes(tiny_model, tmp_path):
    """`unstable run --resume` of the run made at 7a23685 (its model was `tiny-model` in the working
    directory: the tiny model of this session stands in for it) trains its second step."""
    shutil.copytree(OLD_RUN, tmp_path / "runs" / "old7a")
    os.symlink(tiny_model, tmp_path / "tiny-model")
    proc = subprocess.run(
        [sys.executable, "-m", "unstable_core", "run", "--resume", "runs/old7a", "--learning-steps", "2"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    run_dir = tmp_path / "runs" / "old7a"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-1", "step-2"]
    state = json.loads((run_dir / "checkpoints" / "step-2" / "learner_state.json").read_text())
    assert state["step"] == 2 and state["config"]["gradient_checkpointing"] is False
    league = json.loads((run_dir / "registry.json").read_text())
    assert {m["uid"] for m in league["models"]} >= {"ckpt-0", "ckpt-1", "ckpt-2"}
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (resume,) = [e for e in events if e.get("event") == "resume"]
    assert resume["resumed_from_step"] == 1 and resume["changed"] == {"learning_steps": [1, 2]}
    assert any(e.get("step") == 2 and "learner/loss" in e for e in events)


def test_reference_config_mapping():
    mapped = map_vllm_config(REFERENCE_CFG)
    assert mapped.backend_kwargs == {
        "model": "Qwen/Qwen3-1.7B-Base",
        "max_batch_size": 128,
        "max_loras": 8,
        "max_model_len": 8192,
        "lora_rank": 32,
    }
    assert (mapped.temperature, mapped.max_tokens) == (0.6, 4096)
    no_limit = map_vllm_config({**REFERENCE_CFG, "max_tokens": None})
    assert no_limit.max_tokens == 8192  # clamped per request to what the context leaves
    with pytest.raises(UnstableError, match="max_parallel_seqs"):
        map_vllm_config({**REFERENCE_CFG, "max_parallel_seqs": 4})
    with pytest.raises(UnstableError, match="lora_rnk"):
        map_vllm_config({**REFERENCE_CFG, "lora_config": {"lora_rnk": 8}})
    with pytest.raises(UnstableError, match="model_name"):
        map_vllm_config({"temperature": 0.5})
    with pytest.raises(UnstableError, match="temperature"):
        map_vllm_config({**REFERENCE_CFG, "temperature": -1})


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


def test_every_reference_build_parameter_with_its_reference_value(tmp_path):
    """The table of the reference's build(): each parameter at its default is accepted (fixed_opponents
    aside: the reference's API opponent gets a clear error, see below)."""
    from unstable_core.runtime.run import build
    from unstable_core.types import EvalEnvSpec, TrainEnvSpec

    run = build(
        model_name="smollm2-135m",
        train_envs=[TrainEnvSpec("SimpleTak-v0-train", 2, 2, "qwen3-zs")],
        eval_envs=None,
        env_sampling_strategy="random",
        opponent_sampling_strategy="none",
        fixed_opponents=None,
        algorithm="reinforce",
        max_train_len=None,
        max_generation_len=4096,
        batch_size=384,
        mini_batch_size=1,
        learning_rate=1e-5,
        gradient_clipping=0.2,
        activation_checkpointing=True,
        gradient_checkpointing=True,
        use_trainer_cache=False,
        buffer_size=None,
        lora_config=None,
        vllm_config=None,
        wandb_project="UnstableBaselines",
        runs_dir=str(tmp_path),
    )
    cfg = run.cfg
    assert (cfg.sampler, cfg.learner, cfg.env_sampler, cfg.eval_envs, cfg.fixed_opponents) == (
        "mirror", "reinforce", "random", [], []
    )  # fmt: skip
    assert cfg.lora_config == DEFAULT_LORA_CFG and cfg.vllm_config == {}
    assert (cfg.admission, cfg.effective_buffer_size) == ("budget", 2 * 384)  # our admission control
    assert [s.num_actors for s in train_specs(cfg)] == [2]
    for strategy in ("mirror", "fixed"):
        assert config_from_dict({"opponent_sampling_strategy": strategy, "fixed_opponents": ["base"]})
    evals = config_from_dict({"eval_envs": [EvalEnvSpec("KuhnPoker-v0-train", 2, "qwen3-zs")]})
    assert eval_specs(evals)[0].env_id == "KuhnPoker-v0-train"


def test_the_references_api_opponent_is_refused_before_ray_starts():
    with pytest.raises(ConfigError, match="'google/gemini-2.0-flash-lite-001' is an API model"):
        config_from_dict({"fixed_opponents": ["google/gemini-2.0-flash-lite-001"]})


def test_every_reference_vllm_config_key_is_mapped():
    cfg = config_from_dict({"model_name": "m", "vllm_config": dict(REFERENCE_CFG, model_name="m")})
    values = {ub.VLLM_CONFIG_FIELDS[k]: getattr(cfg, ub.VLLM_CONFIG_FIELDS[k]) for k in REFERENCE_CFG}
    assert values == {
        "model_name": "m", "temperature": 0.6, "max_generation_len": 4096, "max_batch_size": 128, "max_loras": 8,
        "lora_config": {**DEFAULT_LORA_CFG, "target_modules": ["q_proj", "v_proj"]}, "max_model_len": 8192,
    }  # fmt: skip
    cfg = config_from_dict({"model_name": "m", "vllm_config": {"max_tokens": None, "max_model_len": 2048}})
    assert cfg.max_generation_len == 2048  # the reference's None: as long as the context allows


def test_vllm_config_on_the_vllm_backend_keeps_backend_options_and_maps_the_rest():
    cfg = config_from_dict(
        {"backend": "vllm", "vllm_config": {"temperature": 0.6, "gpu_memory_utilization": 0.5}}
    )
    assert cfg.temperature == 0.6 and cfg.vllm_config == {"gpu_memory_utilization": 0.5}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"vllm_config": {"temperature": "hot"}}, "vllm_config: could not convert"),
        ({"vllm_config": {"lora_config": {"rank": 4}}}, "unknown vllm_config.lora_config keys"),
        ({"temperature": 0.7, "vllm_config": {"temperature": 0.6}}, "vllm_config.temperature = 0.6 disagrees"),
        ({"lora_config": {"lora_rank": 8}, "vllm_config": {"lora_config": {"lora_rank": 16}}}, "disagrees"),
        ({"backend": "vllm", "vllm_config": {"max_lora_rank": 8}}, "max_lora_rank \\(8\\) is below"),
        ({"vllm_config": "x"}, "vllm_config must be a table"),
    ],
)  # fmt: skip
def test_bad_vllm_config_names_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"backend": "vllm", "vllm_config": {"bogus": 1}}, "vllm_config: unknown key 'bogus'; allowed"),
        ({"vllm_config": {"gpu_memory_utilization": 0.5}}, "option of the vllm backend, but backend is"),
        ({"backend": "vllm", "lora_config": {"lora_rank": 600}}, "above vLLM's largest max_lora_rank"),
    ],
)  # fmt: skip
def test_the_vllm_backends_options_are_checked_before_a_run_starts(data, message):
    from unstable_core.runtime.launch.preflight import check_vllm_config

    cfg = config_from_dict(data)  # the configuration alone does not look at the backend
    with pytest.raises(ConfigError, match=message):
        check_vllm_config(cfg)


def test_later_layers_beat_a_vllm_config_key_of_earlier_ones(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[vllm_config]\ntemperature = 0.6\nmax_tokens = 100\n")
    cfg = load_config(path, {"temperature": 0.9})  # the command line wins over the file's vllm_config
    assert (cfg.temperature, cfg.max_generation_len) == (0.9, 100)
    assert load_config(path, {"vllm_config": {"max_loras": 2}}).temperature == 1.0  # a new table replaces it
    from unstable_core.runtime.run import build

    run = build(RunConfig(runs_dir=str(tmp_path)), vllm_config={"temperature": 0.6})
    assert run.cfg.temperature == 0.6


def test_saved_vllm_config_loads_again(tmp_path):
    cfg = config_from_dict({"backend": "vllm", "vllm_config": {"temperature": 0.6, "max_cpu_loras": 4}})
    cfg.save(tmp_path / "config.toml")
    assert load_config(tmp_path / "config.toml") == cfg
