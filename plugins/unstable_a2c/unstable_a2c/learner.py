"""A2C: a policy LoRA and a critic LoRA on one frozen backbone, a value head, GAE advantages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from unstable_a2c.gae import compute_gae, group_episodes, outcome_rewards, shaped_advantages
from unstable_core.config.validators import boolean, count, number_in, positive
from unstable_core.errors import UnstableError
from unstable_core.learners import POLICY_ADAPTER, BaseLearner, TokenBatch
from unstable_core.learners.shared_prefix import decoder_hidden
from unstable_core.types import Step

CRITIC_ADAPTER = "critic"


@attrs.frozen
class A2CConfig:
    """A2C's options (`--algorithm-config`); each one's `help` says what it does and why its default."""

    gamma: float = attrs.field(
        default=1.0,
        validator=number_in(0.0, 1.0),
        metadata={
            "help": "discount per turn; 1: a game is a short episode whose only delayed reward is its "
            "outcome, which discounting would only shrink for early moves (UnstableBaselines v0.2 "
            "hard-coded gamma = lambda = 1)"
        },
    )
    gae_lambda: float = attrs.field(
        default=0.95,
        validator=number_in(0.0, 1.0),
        metadata={
            "help": "GAE's bias/variance trade-off: 1 is Monte-Carlo returns minus V, unbiased but noisy; "
            "lower leans on the young critic"
        },
    )
    critic_learning_rate: float = attrs.field(
        default=5e-5,
        validator=positive,
        metadata={
            "help": "AdamW learning rate of the critic's adapter and value head, as in UnstableBaselines v0.2"
        },
    )
    normalize_adv: bool = attrs.field(
        default=True,
        validator=boolean,
        metadata={
            "help": "z-score advantages per env id after GAE, as UnstableBaselines v0.2 did, so that envs "
            "with different reward scales weigh alike in a batch"
        },
    )
    infer_mini_batch_size: int = attrs.field(
        default=16,
        validator=count,
        metadata={"help": "steps per forward pass when the critic estimates V for a batch (no gradients)"},
    )


@attrs.frozen
class A2CSample:
    """A step with its GAE advantage (for the policy) and return (the critic's target)."""

    step: Step
    advantage: float
    ret: float


def normalize(values: list[float], eps: float = 1e-8) -> list[float]:
    """(x - mean) / std over the list; only centred when the std is ~0 (no division by zero)."""
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    return [(v - mean) / std if std > eps else v - mean for v in values]


def normalize_by_env(values: list[float], env_ids: list[str]) -> list[float]:
    """`normalize` applied separately to the values of each env id (same order as given)."""
    out = list(values)
    for env in set(env_ids):
        idx = [i for i, e in enumerate(env_ids) if e == env]
        for i, v in zip(idx, normalize([values[i] for i in idx]), strict=True):
            out[i] = v
    return out


class A2CLearner(BaseLearner):
    """Actor-critic with GAE. Call `initialize_algorithm(...)` once (it creates the critic) before update()."""

    buffer_kind = "episode"
    algorithm_config_class = A2CConfig

    def initialize_algorithm(self, **kwargs: Any) -> None:
        """Set gamma, gae_lambda, critic_learning_rate, normalize_adv, infer_mini_batch_size; build the critic."""
        import torch

        self.a2c: A2CConfig = self.accept_algorithm_kwargs(A2CConfig, kwargs)
        self.model.add_adapter(CRITIC_ADAPTER, self.lora_config())
        self.model.set_requires_grad([POLICY_ADAPTER, CRITIC_ADAPTER], requires_grad=True)
        hidden = self.model.get_base_model().config.hidden_size
        self.value_head = torch.nn.Linear(hidden, 1).to(self.device, torch.float32)
        torch.nn.init.zeros_(self.value_head.weight)  # V = 0 at first: A2C starts as REINFORCE on returns
        torch.nn.init.zeros_(self.value_head.bias)
        critic_params = self.adapter_parameters(CRITIC_ADAPTER) + list(self.value_head.parameters())
        self.optimizers["critic"] = torch.optim.AdamW(critic_params, lr=self.a2c.critic_learning_rate)

    def critic_values(self, tokens: TokenBatch) -> Any:
        """[B] V(s) from the critic's last hidden state at each row's last prompt token. Call it inside
        `use_adapter(CRITIC_ADAPTER)`."""
        import torch

        width = int(tokens.last_prompt_index.max()) + 1  # V(s) sees the prompt only (causal attention)
        decoder = self.model.get_base_model().get_decoder()
        hidden = decoder_hidden(  # a prompt prefix that every row shares runs once
            decoder, tokens.input_ids[:, :width], tokens.attention_mask[:, :width], tokens.last_prompt_index
        )  # [B, W, H]
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        h_last = hidden[rows, tokens.last_prompt_index]  # [B, H]
        return self.value_head(h_last.float()).squeeze(-1)  # [B]

    def prepare_batch(self, batch: list[Step]) -> list[A2CSample]:
        """Group into episodes, compute V with no grad, then per episode GAE on the outcome (advantages and
        the critic's returns) and each step's own shaping added to its advantage."""
        import torch

        episodes = group_episodes(batch)
        ordered = [step for episode in episodes for step in episode]
        values: list[float] = []
        self.model.eval()  # no LoRA dropout while estimating V
        with torch.no_grad(), self.use_adapter(CRITIC_ADAPTER):
            for lo in range(0, len(ordered), self.a2c.infer_mini_batch_size):
                chunk = ordered[lo : lo + self.a2c.infer_mini_batch_size]
                values.extend(self.critic_values(self.collate(chunk)).tolist())
        self.model.train()

        advantages: list[float] = []
        returns: list[float] = []
        at = 0
        for episode in episodes:
            ep_values = values[at : at + len(episode)]
            ep_adv, ep_ret = compute_gae(
                outcome_rewards(episode), ep_values, self.a2c.gamma, self.a2c.gae_lambda
            )
            advantages += shaped_advantages(ep_adv, episode)
            returns += ep_ret  # the critic's target: the outcome's value, shaping left out
            at += len(episode)
        if self.a2c.normalize_adv:
            advantages = normalize_by_env(advantages, [s.env_id for s in ordered])
        return [
            A2CSample(step=s, advantage=a, ret=r)
            for s, a, r in zip(ordered, advantages, returns, strict=True)
        ]

    def _update(self, batch: list[A2CSample], scale: float) -> dict[str, float]:
        """Policy: -A * sum_t w_t log pi_T(y_t) / max_generation_len; critic: 0.5 (V - R)^2; both batch means."""
        import torch

        tokens = self.collate([sample.step for sample in batch])
        advantages = torch.tensor(
            [s.advantage for s in batch], dtype=torch.float32, device=self.device
        )  # [B]
        returns = torch.tensor([s.ret for s in batch], dtype=torch.float32, device=self.device)  # [B]

        # Each backward runs inside its adapter's block: checkpointed layers recompute with the active adapter.
        logp = self.policy_logprobs(tokens)  # [B, T-1], 0 off the completion
        weights = self.importance_weights(logp, tokens)  # [B, T-1], no gradient; 1 without a cap
        policy_loss = (-advantages * (weights * logp).sum(dim=-1) / self.config.max_generation_len).mean()
        (policy_loss * scale).backward()

        with self.use_adapter(CRITIC_ADAPTER):
            values = self.critic_values(tokens)  # [B]
            value_loss = 0.5 * ((values - returns) ** 2).mean()
            (value_loss * scale).backward()

        return {
            "policy_loss": policy_loss.item(),
            "value_loss": value_loss.item(),
            "value_mean": values.mean().item(),
            "return_mean": returns.mean().item(),
            "advantage_mean": advantages.mean().item(),
        }

    def _save_extra(self, folder: Path) -> None:
        """The critic adapter (peft layout) and the value head, in `critic/`."""
        from safetensors.torch import save_file

        # peft writes a non-default adapter into a subfolder of its name: folder/critic/
        self.model.save_pretrained(str(folder), selected_adapters=[CRITIC_ADAPTER])
        head = {
            name: value.detach().contiguous().cpu() for name, value in self.value_head.state_dict().items()
        }
        save_file(head, str(folder / CRITIC_ADAPTER / "value_head.safetensors"))

    def _load_extra(self, folder: Path) -> None:
        """Restore the critic adapter and the value head from `critic/`."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        critic = folder / CRITIC_ADAPTER
        if not (critic / "value_head.safetensors").is_file():
            raise UnstableError(
                f"checkpoint {folder} has no critic/value_head.safetensors; it is not an A2C checkpoint"
            )
        weights = load_file(str(critic / "adapter_model.safetensors"), device=str(self.device))
        set_peft_model_state_dict(self.model, weights, adapter_name=CRITIC_ADAPTER)
        self.value_head.load_state_dict(
            load_file(str(critic / "value_head.safetensors"), device=str(self.device))
        )
