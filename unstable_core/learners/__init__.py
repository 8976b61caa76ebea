"""Learners: `BaseLearner` (LoRA model, micro-batching, clipping, checkpoints) and the helpers algorithms use."""

from unstable_core.learners.base import POLICY_ADAPTER, BaseLearner, LearnerConfig
from unstable_core.learners.batch import TokenBatch, collate, completion_logprobs, head_logprobs
from unstable_core.learners.lora import DEFAULT_LORA_CFG

__all__ = [
    "DEFAULT_LORA_CFG",
    "POLICY_ADAPTER",
    "BaseLearner",
    "LearnerConfig",
    "TokenBatch",
    "collate",
    "completion_logprobs",
    "head_logprobs",
]
