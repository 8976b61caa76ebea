"""BaseLearner: a causal LM with a LoRA policy adapter, AdamW, micro-batched updates with gradient
accumulation and clipping, and pickle-free checkpoints. Algorithms subclass it and write `_update`.

The runtime hosts a learner inside a Ray actor; this class itself is plain Python.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import attrs

from unstable_core.config import config_from_dict
from unstable_core.errors import ConfigError, UnstableError
from unstable_core.learners.batch import (
    TokenBatch,
    collate,
    completion_logprobs,
    head_logprobs,
    too_long,
)
from unstable_core.learners.checkpoint import (
    OPTIMIZER_FILE,
    optimizer_state_from_flat,
    optimizer_state_to_flat,
    read_json,
    write_folder_atomically,
    write_json,
)
from unstable_core.learners.data_parallel import DataParallel, GradientSum, merge_sums, to_cpu
from unstable_core.learners.dropout import has_dropout, reference_mode
from unstable_core.learners.lora import make_lora_config, present_target_modules
from unstable_core.learners.off_policy import OffPolicyStats, importance_weights
from unstable_core.learners.precision import decoder_precision, uses_autocast
from unstable_core.learners.settings import LearnerConfig, algorithm_config, lr_factor
from unstable_core.learners.shared_prefix import decoder_hidden, micro_batch_order
from unstable_core.model_loading import plain_linear_head
from unstable_core.plugins import registered_name
from unstable_core.types import Step

POLICY_ADAPTER = "default"  # peft's name for the adapter saved at a checkpoint folder's root


class BaseLearner:
    """A LoRA-adapted causal LM trained by `update(batch)`; subclasses implement `_update` (one micro-batch).

    `buffer_kind` tells the runtime what to feed it: "step" (any steps) or "episode" (whole trajectories).
    Adding an algorithm::

        class MyLearner(BaseLearner):
            def _update(self, batch, scale):
                tokens = self.collate(batch)
                logp = self.policy_logprobs(tokens)  # [B, T-1] log pi_T of the sampled tokens
                weights = self.importance_weights(logp, tokens)  # [B, T-1], 1 unless importance_cap
                loss = ...  # a per-sample mean
                (loss * scale).backward()
                return {"loss": loss.item()}

    and register it from a plugin: `register("my-algo", "my_pkg.learner:MyLearner")`.
    """

    buffer_kind: ClassVar[str] = "step"
    #: the cap on pi/mu when --importance-cap is not given: steps up to max_staleness policy versions old
    #: are reweighted toward the current policy, the weight truncated at 2 as oat and ppo's default do
    default_importance_cap: ClassVar[float | None] = 2.0
    #: the attrs class of `initialize_algorithm`'s options, so that a run checks them before anything
    #: starts (`check_options`); None for a learner without options or one that does not declare them
    algorithm_config_class: ClassVar[type | None] = None
    #: attributes holding attrs statistics of sums that `_update` adds to: with data parallelism each rank
    #: adds only its micro-batches', and the optimizer step merges them over the ranks (`merge_sums`)
    step_stats: ClassVar[tuple[str, ...]] = ("_off_policy",)
    #: where the learner weights for the sampler itself (an option of its own, e.g. "behaviour_weight_cap in
    #: --algorithm-config"): then --importance-cap is refused, before the start and in the actor; None: it
    #: uses the base's truncated weight
    own_importance_weight: ClassVar[str | None] = None

    @classmethod
    def check_options(cls, algorithm_kwargs: Mapping[str, Any], importance_cap: float | None = None) -> None:
        """Raise ConfigError for options this learner would refuse, without a model (a run calls it before
        Ray starts): the algorithm options, checked when the learner declares `algorithm_config_class` or
        takes none (BaseLearner's own `initialize_algorithm`)."""
        cls.check_importance_cap(importance_cap)
        if (
            cls.algorithm_config_class is None
            and cls.initialize_algorithm is not BaseLearner.initialize_algorithm
        ):
            return  # options of its own, undeclared: its initialize_algorithm checks them in the actor
        algorithm_config(registered_name("learner", cls), cls.algorithm_config_class, dict(algorithm_kwargs))

    @classmethod
    def check_importance_cap(cls, importance_cap: float | None) -> None:
        """ConfigError when --importance-cap is given to a learner that weights for the sampler itself."""
        if cls.own_importance_weight is not None and importance_cap is not None:
            name = registered_name("learner", cls)
            raise ConfigError(
                f"{name} weights for the sampler itself ({cls.own_importance_weight}); drop --importance-cap "
                "(it is for reinforce and a2c)"
            )

    @classmethod
    def create(
        cls, model_name: str, *, run_dir: str | Path, device: str | None = None, **settings: Any
    ) -> Any:
        """A learner outside a run (tests, scripts): `settings` are `RunConfig` keys (`learning_rate=1e-4`),
        checked and defaulted as a run's are."""
        return cls(
            LearnerConfig.from_run(config_from_dict({"model_name": model_name, **settings}), cls),
            run_dir=run_dir,
            device=device,
        )

    def __init__(self, config: LearnerConfig, *, run_dir: str | Path, device: str | None = None) -> None:
        import torch
        from peft import get_peft_model

        from unstable_core.inference.hf.packed_linear import pack_linear_layers
        from unstable_core.model_loading import default_device, load_causal_lm

        self.config = config
        model_name, seed = config.model_name, config.seed
        self.run_dir = Path(run_dir)
        self.device = torch.device(device or default_device())
        torch.manual_seed(seed)

        base = load_causal_lm(model_name, device=str(self.device))
        self.target_modules = present_target_modules(base, self.config.lora_config["target_modules"])
        base.config.use_cache = False
        if self.config.gradient_checkpointing:  # torch.utils.checkpoint per decoder layer, non-reentrant
            enable = getattr(base, "activation_checkpointing_enable", None)  # transformers >= 5.x name
            if enable is not None:
                enable({"use_reentrant": False})
            else:
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            base.enable_input_require_grads()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            self.model = get_peft_model(base, self.lora_config(), adapter_name=POLICY_ADAPTER)
        self.model.train()
        self.has_dropout = has_dropout(self.model)  # train-mode forwards are then random: see `dropout`
        self.autocast = uses_autocast(config.learner_autocast, self.device)
        # on CPU the frozen base layers run on oneDNN-packed fp32 weights: an update about 1.5x faster
        self.packed_layers = 0 if self.autocast else pack_linear_layers(self.model, frozen_only=True)
        pad = base.config.pad_token_id if base.config.pad_token_id is not None else base.config.eos_token_id
        self.pad_token_id: int = int(pad) if pad is not None else 0

        self.optimizers: dict[str, Any] = {
            "policy": torch.optim.AdamW(self.adapter_parameters(POLICY_ADAPTER), lr=config.learning_rate)
        }
        self.step = 0  # the policy version: number of update() calls so far
        self.algorithm_cfg: dict[str, Any] = {}
        self._algorithm_ready = False
        self._off_policy = OffPolicyStats()
        self.data_parallel: DataParallel | None = None  # set by `join_data_parallel`
        self.optimizer_fresh = False  # a loaded checkpoint had no optimizer state

    def join_data_parallel(self, data_parallel: DataParallel) -> None:
        """Train as one rank of a process group (which `data_parallel` has joined): every optimizer step
        takes this rank's share of the micro-batches and sums the gradients over the group. Rank 0's
        trainable parameters, optimizer states and step are copied to all, so every rank starts from the
        same policy (only rank 0 needs to have loaded a checkpoint)."""
        self.data_parallel = data_parallel
        data_parallel.broadcast_parameters(self.trainable_parameters())
        state = data_parallel.broadcast(
            {
                "step": self.step,
                "optimizers": {name: to_cpu(opt.state_dict()) for name, opt in self.optimizers.items()},
            }
        )
        if data_parallel.rank > 0:  # a resumed run's state, from rank 0's checkpoint: no shared disk needed
            self.step = int(state["step"])
            for name, opt in self.optimizers.items():
                opt.load_state_dict(state["optimizers"][name])

    def trainable_parameters(self) -> list[Any]:
        """Every parameter an optimizer steps (the adapters', a value head's), in a fixed order."""
        return [p for opt in self.optimizers.values() for group in opt.param_groups for p in group["params"]]

    # ---- algorithm hooks -------------------------------------------------------------------------

    def initialize_algorithm(self, **kwargs: Any) -> None:
        """Set the algorithm's hyper-parameters (none for the base); unknown names raise UnstableError."""
        self.accept_algorithm_kwargs(None, kwargs)

    def prepare_batch(self, batch: list[Step]) -> list[Any]:
        """Whole-batch preprocessing before micro-batching (A2C computes values and GAE here)."""
        return batch

    def _update(self, batch: list[Any], scale: float) -> dict[str, float]:
        """Forward one micro-batch, `(loss * scale).backward()`, return its metrics (per-sample means)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _update(batch, scale)")

    def _save_extra(self, folder: Path) -> None:
        """Write algorithm state beyond the policy adapter and optimizers into a checkpoint folder."""

    def _load_extra(self, folder: Path) -> None:
        """Read what `_save_extra` wrote."""

    # ---- helpers for subclasses ------------------------------------------------------------------

    def accept_algorithm_kwargs(self, config_cls: type | None, kwargs: dict[str, Any]) -> Any:
        """Build the attrs `config_cls` from `kwargs` (None: no kwargs allowed), naming unknown keys."""
        if self._algorithm_ready:
            raise UnstableError(
                f"{type(self).__name__}.initialize_algorithm() was already called; call it once"
            )
        self.check_importance_cap(self.config.importance_cap)
        cfg = algorithm_config(registered_name("learner", type(self)), config_cls, kwargs)
        self.algorithm_cfg = attrs.asdict(cfg) if cfg is not None else {}
        self._algorithm_ready = True
        return cfg

    def lora_config(self) -> Any:
        """A fresh peft LoraConfig of this learner's lora_config (for the policy or an extra adapter)."""
        return make_lora_config(self.config.lora_config, self.target_modules)

    def adapter_parameters(self, adapter: str) -> list[Any]:
        """The LoRA parameters of one adapter (names like `...lora_A.<adapter>.weight`)."""
        marker = f".{adapter}."
        params = [p for n, p in self.model.named_parameters() if "lora_" in n and marker in n]
        if not params:
            raise UnstableError(f"the model has no adapter {adapter!r}")
        return params

    @contextmanager
    def use_adapter(self, adapter: str) -> Iterator[None]:
        """Run forwards with only `adapter` active; every adapter stays trainable (peft's set_adapter
        would freeze the others). Finish the backward pass inside the block: gradient checkpointing
        recomputes the forward with whatever adapter is active then."""
        previous = self.model.active_adapter
        self._activate(adapter)
        try:
            yield
        finally:
            self._activate(previous)

    def _activate(self, adapter: str) -> None:
        if self.model.active_adapter != adapter:
            self.model.set_adapter(adapter)
            self.model.set_requires_grad(list(self.model.peft_config), requires_grad=True)

    def collate(self, batch: Sequence[Step]) -> TokenBatch:
        """Right-padded tensors of the steps' exact token ids on the learner's device (see `batch.collate`)."""
        return collate(batch, pad_token_id=self.pad_token_id, device=self.device, policy_version=self.step)

    def completion_logprobs(self, logits: Any, batch: TokenBatch, entropy: bool = False) -> Any:
        """[B, T-1] tempered log-probs of the sampled completion tokens from full logits; 0 elsewhere
        (with `entropy`, also the tempered entropy there: a pair)."""
        return completion_logprobs(logits, batch, self.config.temperature, entropy, self.config.top_p)

    def policy_logits(self, batch: TokenBatch) -> Any:
        """[B, T, V] logits of the policy (base model + policy adapter, which is active outside `use_adapter`)."""
        return self.model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        ).logits

    def policy_logprobs(self, batch: TokenBatch, entropy: bool = False) -> Any:
        """[B, T-1] log pi_T(y_t | x, y_<t) of the sampled completion tokens, 0 elsewhere: the policy tempered
        like the sampler (logits / T), its LM head and log-softmax in float32, only at completion positions.
        A head that is more than a plain Linear (a LoRA on lm_head, soft-capped or scaled logits) runs as the
        model runs it, on all positions. A prompt prefix that every row shares runs once (`shared_prefix`).
        With `entropy`, also the tempered policy's entropy at those positions: a pair of [B, T-1] tensors."""
        base = self.model.get_base_model()
        if not plain_linear_head(base):
            return self.completion_logprobs(self.policy_logits(batch), batch, entropy)
        head = base.get_output_embeddings()
        hidden = decoder_hidden(
            base.get_decoder(), batch.input_ids, batch.attention_mask, batch.last_prompt_index
        )  # [B, T, H]
        return head_logprobs(hidden, head, batch, self.config.temperature, entropy, self.config.top_p)

    def reference_logprobs(self, batch: TokenBatch) -> Any:
        """[B, T-1] `policy_logprobs` without gradient or dropout (eval mode): the policy itself, as pi_old,
        the base's log-probs and importance weights need it, not one random dropout mask of it."""
        with reference_mode(self.model):
            return self.policy_logprobs(batch)

    def importance_weights(self, logp: Any, batch: TokenBatch) -> Any:
        """[B, T-1] truncated importance weights min(pi/mu, importance_cap) (all 1 without a cap); also
        records this micro-batch's ratio and KL statistics for the update's `off_policy/...` metrics. With
        dropout on, pi comes from a `reference_logprobs` pass: `logp`'s dropout noise is not off-policyness."""
        cap = self.config.importance_cap
        if self.has_dropout and self.model.training and bool(batch.behaviour_mask.any()):
            logp = self.reference_logprobs(batch)
        self.record_off_policy(logp, batch)
        return importance_weights(logp, batch.behaviour_logprobs, batch.behaviour_mask, cap)

    def record_off_policy(self, logp: Any, batch: TokenBatch) -> None:
        """Add this micro-batch's ratio pi/mu and KL statistics to the update's `off_policy/...` metrics."""
        self._off_policy.add(
            logp, batch.behaviour_logprobs, batch.behaviour_mask, self.config.importance_cap, batch.fresh
        )

    def drop_too_long(self, batch: list[Step]) -> list[Step]:
        """The batch without steps longer than max_train_len (whole episodes for an episode learner)."""
        long = [s for s in batch if too_long(s, self.config.max_train_len)]
        if not long:
            return batch
        if self.buffer_kind == "episode":
            bad = {(s.game_idx, s.pid) for s in long}
            return [s for s in batch if (s.game_idx, s.pid) not in bad]
        return [s for s in batch if not too_long(s, self.config.max_train_len)]

    # ---- the update ------------------------------------------------------------------------------

    def update(self, batch: list[Step]) -> dict[str, float]:
        """One update on `batch` (one new policy version): drop over-long steps, prepare, `optimize` (one
        optimizer step for most algorithms). Returns averaged metrics."""
        if not self._algorithm_ready:
            raise UnstableError(f"call {type(self).__name__}.initialize_algorithm() before update()")
        if not batch:
            raise UnstableError("update() got an empty batch; pass at least one Step")
        start = time.perf_counter()
        kept = self.drop_too_long(list(batch))
        if not kept:
            raise UnstableError(
                f"every step of the batch is longer than max_train_len={self.config.max_train_len} tokens "
                "(prompt + completion); raise --max-train-len or shorten the prompts / --max-generation-len"
            )
        self.model.train()
        self._off_policy = OffPolicyStats()
        with decoder_precision(self.autocast):
            samples = self.prepare_batch(kept)
        prepared = time.perf_counter()
        lr = self.set_learning_rate()
        metrics = self.optimize(samples)
        metrics["lr"] = lr
        metrics.update(self._off_policy.metrics())
        self.step += 1
        end = time.perf_counter()
        metrics.update(
            {
                "step": float(self.step),
                "batch_size": float(len(kept)),
                "steps_too_long": float(len(batch) - len(kept)),
                "policy_lag": sum(self.step - 1 - s.policy_version for s in kept) / len(kept),
                "time/prepare_s": prepared - start,
                "time/update_s": end - start,
            }
        )
        return metrics

    def set_learning_rate(self) -> float:
        """Scale every optimizer's learning rate for update `self.step + 1` by `lr_schedule`; returns the
        policy's. Set from the step each time (no scheduler state), so a resumed run continues the schedule."""
        factor = lr_factor(self.config.lr_schedule, self.step, self.config.learning_steps)
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                group["lr"] = group.setdefault("initial_lr", group["lr"]) * factor
        return float(self.optimizers["policy"].param_groups[0]["lr"])

    def optimize(self, samples: list[Any]) -> dict[str, float]:
        """Train on the prepared samples of one update: one `optimizer_step` for the base; an algorithm that
        takes several steps per batch (PPO's epochs and mini-batches) overrides this."""
        return self.optimizer_step(samples)

    def optimizer_step(self, samples: list[Any]) -> dict[str, float]:
        """One optimizer step on `samples`, cut into micro-batches of mini_batch_size after sorting them by
        their prompt's opening tokens, then length: the step's gradient is the sum over all of them whatever
        their grouping; rows of one prompt frame share its prefix's computation (`shared_prefix`), and
        neighbours in length waste less on padding (6% fewer padded tokens on TicTacToe's steps)."""
        mbs = self.config.mini_batch_size
        ordered = sorted(samples, key=micro_batch_order)
        return self.optimizer_step_on([ordered[lo : lo + mbs] for lo in range(0, len(ordered), mbs)])

    def optimizer_step_on(self, micro_batches: list[list[Any]]) -> dict[str, float]:
        """Accumulate gradients over `micro_batches`, each forwarded as given (so the loss is the mean over
        their samples), clip each optimizer's grad norm to gradient_clipping, step (skipped if a norm is not
        finite). Returns the metrics. With data parallelism this rank forwards its share of the
        micro-batches, each scaled against the whole step, and the gradients, metrics and `step_stats` are
        summed over the ranks before clipping: every rank then takes the one-process step."""
        import torch

        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)
        n = sum(len(micro) for micro in micro_batches)
        dp = self.data_parallel
        before = {name: getattr(self, name) for name in self.step_stats} if dp else {}
        for name, stats in before.items():
            setattr(self, name, type(stats)())  # this rank's additions alone, merged below
        metrics: dict[str, float] = {}
        gradients = GradientSum(self.trainable_parameters())
        for micro in dp.share(micro_batches) if dp else micro_batches:
            scale = len(micro) / n
            with decoder_precision(self.autocast):
                micro_metrics = self._update(micro, scale)
            for key, value in micro_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + float(value) * scale
            gradients.add()
        if dp:
            metrics = dp.sum_metrics(metrics)
            for name, stats in before.items():
                setattr(self, name, merge_sums(stats, dp.merge_stats(getattr(self, name))))
            dp.sum_gradients(gradients)
        gradients.write()

        finite = True
        for name, opt in self.optimizers.items():
            params = [p for group in opt.param_groups for p in group["params"]]
            norm = float(torch.nn.utils.clip_grad_norm_(params, self.config.gradient_clipping))
            metrics["grad_norm" if name == "policy" else f"grad_norm/{name}"] = norm
            finite = finite and math.isfinite(norm)
        if finite:
            for opt in self.optimizers.values():
                opt.step()
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)
        metrics["skipped_nonfinite"] = float(not finite)
        return metrics

    # ---- checkpoints -----------------------------------------------------------------------------

    def checkpoint_dir(self, step: int | None = None) -> Path:
        """`run_dir/checkpoints/step-<n>` for the current (or given) step."""
        return self.run_dir / "checkpoints" / f"step-{self.step if step is None else step}"

    def save_checkpoint(self, extra_json: dict[str, Any] | None = None) -> Path:
        """Write the policy adapter (peft layout, at the folder root), optimizer state (safetensors),
        learner_state.json and any `extra_json` files (name -> data; the runtime's run_state.json) to
        `run_dir/checkpoints/step-<n>/`, atomically; return the folder."""
        from safetensors.torch import save_file

        def fill(folder: Path) -> None:
            self.model.save_pretrained(str(folder), selected_adapters=[POLICY_ADAPTER])
            tensors: dict[str, Any] = {}
            rest: dict[str, Any] = {}
            for name, opt in self.optimizers.items():
                flat, rest[name] = optimizer_state_to_flat(opt.state_dict())
                tensors.update({f"{name}/{key}": value for key, value in flat.items()})
            save_file(tensors, str(folder / OPTIMIZER_FILE))
            self._save_extra(folder)
            for name, data in (extra_json or {}).items():
                write_json(folder / name, data)
            write_json(
                folder / "learner_state.json",
                {
                    "step": self.step,
                    "learner": type(self).__name__,
                    "config": attrs.asdict(self.config),
                    "algorithm_cfg": self.algorithm_cfg,
                    "optimizers": rest,
                },
            )

        self.checkpoint_dir().parent.mkdir(parents=True, exist_ok=True)
        return write_folder_atomically(self.checkpoint_dir(), fill)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore the policy adapter, optimizer state(s), algorithm extras and step from a checkpoint folder;
        one whose optimizer state was pruned starts the optimizers fresh (`optimizer_fresh` says so)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        if not self._algorithm_ready:
            raise UnstableError(f"call {type(self).__name__}.initialize_algorithm() before load_checkpoint()")
        folder = Path(path)
        state = read_json(folder / "learner_state.json")
        if state.get("learner") != type(self).__name__:
            raise UnstableError(
                f"checkpoint {folder} was written by {state.get('learner')}, not {type(self).__name__}; use that learner"
            )
        saved = state["config"]
        lora = saved.get(
            "lora_config", saved.get("lora_cfg")
        )  # its name before LearnerConfig took RunConfig's
        if lora != self.config.lora_config:
            raise UnstableError(
                f"checkpoint {folder} has lora_config {lora}, the learner has {self.config.lora_config}; "
                "create the learner with the checkpoint's lora_config"
            )
        weights = load_file(str(folder / "adapter_model.safetensors"), device=str(self.device))
        result = set_peft_model_state_dict(self.model, weights, adapter_name=POLICY_ADAPTER)
        if getattr(result, "unexpected_keys", None):
            raise UnstableError(
                f"checkpoint {folder} has adapter weights the model lacks: {result.unexpected_keys[:3]}"
            )
        self.optimizer_fresh = not (folder / OPTIMIZER_FILE).is_file()
        if not self.optimizer_fresh:  # an older checkpoint's was pruned (keep_optimizer_states)
            tensors = load_file(str(folder / OPTIMIZER_FILE), device="cpu")
            missing = sorted(set(self.optimizers) - set(state["optimizers"]))
            if missing:
                raise UnstableError(f"checkpoint {folder} has no state for optimizer(s) {', '.join(missing)}")
            for name, opt in self.optimizers.items():
                prefix = f"{name}/"
                flat = {key[len(prefix) :]: value for key, value in tensors.items() if key.startswith(prefix)}
                opt.load_state_dict(optimizer_state_from_flat(flat, state["optimizers"][name]))
        self._load_extra(folder)
        self.step = int(state["step"])
