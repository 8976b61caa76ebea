"""GPU memory of one data-parallel learner worker (`--learner-workers N`), by arithmetic: the table of
docs/gpus-and-clusters.md (a test keeps the page equal to this script's output).

Every worker holds the whole frozen base in bf16 (DDP with a frozen base, not FSDP): what N workers
divide is the batch, not the model. Per worker:

- base: the model's parameters in bf16 (the learner loads it in bf16 on a GPU: `models.default_dtype`);
- LoRA: rank r on q, k, v, o, gate, up, down of every layer (`learners/lora.py`); peft keeps the adapter in
  fp32 over a bf16 base (`autocast_adapter_dtype`), so 24 bytes a parameter: the fp32 weight, its fp32
  gradient, AdamW's two fp32 moments and the float64 gradient sum the workers all-reduce
  (`learners/data_parallel.py` GradientSum);
- checkpoints: with `--gradient-checkpointing`, each layer's input hidden state, bf16 (layers x tokens x
  hidden x 2 bytes); without it, every layer's saved activations;
- one layer's working set: what autograd saves in one Qwen3 decoder layer (`layer_bytes_per_token`, which
  `measured_layer_bytes_per_token` checks against torch on a small layer), counted twice for the
  gradients in flight while that layer's backward runs;
- head: the fp32 copy of the LM head's weight and three fp32 [completion tokens x vocab] tensors (the
  log-softmax, its gradient and the gradient it passes on): the learner runs its head and log-softmax in
  fp32 at completion positions only (`learners/batch.py` head_logprobs), plus the final norm;
- 1 GiB for the CUDA context and NCCL's buffers.

    python3 benchmarks/memory_arithmetic.py                    # the table, markdown
    python3 benchmarks/memory_arithmetic.py --seq-len 2048 --completion-tokens 512 --rank 64
"""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from unstable_core.cli.options import add_config_argument

GIB = 1 << 30
GPUS_GIB = (24, 40, 80)  # the GPU sizes the table answers for
HEADROOM = 0.9  # a plan fits a GPU when it needs at most this share of its memory (allocator fragmentation)
CUDA_CONTEXT = 1 * GIB


@attrs.frozen
class Arch:
    """The shape of a Qwen3 dense model, from its published config.json."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool  # tie_word_embeddings: the LM head is the embedding


#: Qwen/Qwen3-*'s config.json (hidden_size, num_hidden_layers, intermediate_size, num_attention_heads,
#: num_key_value_heads, head_dim, vocab_size, tie_word_embeddings); the parameter counts they give
#: (1.72B, 4.02B, 8.19B, 14.8B, 32.8B) match Qwen's model cards.
QWEN3 = {
    "Qwen3-1.7B": Arch(2048, 28, 6144, 16, 8, 128, 151936, True),
    "Qwen3-4B": Arch(2560, 36, 9728, 32, 8, 128, 151936, True),
    "Qwen3-8B": Arch(4096, 36, 12288, 32, 8, 128, 151936, False),
    "Qwen3-14B": Arch(5120, 40, 17408, 40, 8, 128, 151936, False),
    "Qwen3-32B": Arch(5120, 64, 25600, 64, 8, 128, 151936, False),
}


def projections(a: Arch) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of one decoder layer."""
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    h, i = a.hidden, a.intermediate
    return {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def base_params(a: Arch) -> int:
    """Embedding, layers (projections and the four RMSNorms: input, post-attention, q and k), final norm
    and, when untied, the LM head."""
    layer = sum(n * m for n, m in projections(a).values()) + 2 * a.hidden + 2 * a.head_dim
    return a.vocab * a.hidden * (1 if a.tied else 2) + a.layers * layer + a.hidden


def lora_params(a: Arch, rank: int) -> int:
    """A rank-r LoRA on every projection: r x (in + out) per layer and projection."""
    return a.layers * sum(rank * (n + m) for n, m in projections(a).values())


def layer_bytes_per_token(a: Arch, rank: int, padded: bool = True) -> int:
    """What autograd keeps, per token, for the backward pass of one Qwen3 decoder layer in bf16 with an
    fp32 LoRA (frozen base projections save nothing but their weight). Per term:

    - 28 H: the two RMSNorms' fp32 inputs (4 H each) and the fp32 copies of the inputs peft gives the
      LoRA A matrices of q, k, v, gate and up (4 H each);
    - 12 q: the q RMSNorm's fp32 input, the attention's q and output (bf16) and o's LoRA input copy (fp32);
    - 8 kv: the k RMSNorm's fp32 input, the attention's k and v (bf16) - but with an attention mask
      (`padded`: right-padded micro-batches) transformers repeats k and v to every query head before sdpa
      on CUDA, which then keeps them at 2 q each: 4 kv + 4 q;
    - 10 I: gate's and up's outputs and silu(gate) (bf16), down's LoRA input copy (fp32);
    - 28 r: the LoRA A outputs (fp32); 4 head_dim: rope's cos and sin; the rest: norms' rsqrt, softmax lse.
    """
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    small = 4 * (2 + a.heads + a.kv_heads) + 4 * a.heads
    attention = 4 * kv + 4 * (q if padded else kv)
    return 28 * a.hidden + 12 * q + attention + 10 * a.intermediate + 28 * rank + 4 * a.head_dim + small


@attrs.frozen
class Batch:
    """One micro-batch: `sequences` of `seq_len` tokens, `completion` of them completion tokens."""

    sequences: int = 4
    seq_len: int = 1024
    completion: int = 256  # per sequence: where the fp32 head runs

    @property
    def tokens(self) -> int:
        return self.sequences * self.seq_len


def worker_memory(
    a: Arch, rank: int = 32, batch: Batch = Batch(), checkpointing: bool = True
) -> dict[str, int]:
    """Bytes per learner worker, by part (see the module's docstring)."""
    t, n = batch.tokens, batch.sequences * batch.completion
    layer = layer_bytes_per_token(a, rank) * t
    parts = {
        "base": 2 * base_params(a),
        "lora": 24 * lora_params(a, rank),
        "checkpoints": a.layers * t * a.hidden * 2 if checkpointing else a.layers * layer,
        "layer": 2 * layer if checkpointing else layer,
        "head": 4 * a.vocab * a.hidden + 3 * 4 * n * a.vocab + 4 * t * a.hidden + 4 * n * a.hidden,
        "cuda": CUDA_CONTEXT,
    }
    parts["total"] = sum(parts.values())
    return parts


def _gib(b: int) -> str:
    return f"{b / GIB:.1f}"


def fits(total: int) -> str:
    """The smallest of GPUS_GIB whose HEADROOM share holds `total`, as `24 GB`, or `> 80 GB`."""
    return next((f"{g} GB" for g in GPUS_GIB if total <= HEADROOM * g * GIB), "> 80 GB")


def table(rank: int = 32, batch: Batch = Batch(), models: tuple[str, ...] = tuple(QWEN3)) -> str:
    """The markdown table of docs/gpus-and-clusters.md: GiB per worker, by part, and the smallest GPU."""
    rows = [
        f"| model | base bf16 | LoRA r{rank} (params) | checkpoints | one layer | fp32 head | CUDA | per worker "
        "| smallest GPU | without checkpointing |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in models:
        a = QWEN3[name]
        m, plain = worker_memory(a, rank, batch), worker_memory(a, rank, batch, checkpointing=False)
        rows.append(
            f"| {name} | {_gib(m['base'])} | {_gib(m['lora'])} ({lora_params(a, rank) / 1e6:.0f}M) "
            f"| {_gib(m['checkpoints'])} | {_gib(m['layer'])} | {_gib(m['head'])} | {_gib(m['cuda'])} "
            f"| **{_gib(m['total'])}** | {fits(m['total'])} | {_gib(plain['total'])} ({fits(plain['total'])}) |"
        )
    return "\n".join(rows)


def measured_layer_bytes_per_token(
    a: Arch, rank: int, padded: bool = True, sequences: int = 2, seq_len: int = 64
) -> float:
    """Bytes per token that autograd saves in one real Qwen3 decoder layer of shape `a` (bf16, sdpa) with
    the project's LoRA (fp32 over bf16, as on a GPU), parameters and the attention mask (one for all
    layers) not counted: the check of `layer_bytes_per_token`. Runs on the CPU; use a small `a`."""
    import warnings

    import torch
    from peft import get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from unstable_core.config.lora import DEFAULT_LORA_CFG
    from unstable_core.learners.lora import make_lora_config

    config = Qwen3Config(
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=1,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        vocab_size=a.vocab,
        tie_word_embeddings=a.tied,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    lora: dict[str, Any] = {**DEFAULT_LORA_CFG, "lora_rank": rank}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(model, make_lora_config(lora, lora["target_modules"]))
    model.train()
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    real = torch.arange(seq_len)[None] < torch.tensor([seq_len - 3 * i for i in range(sequences)])[:, None]
    mask = (causal[None] & real[:, None, :])[:, None] if padded else None  # [B, 1, T, T]: right padding
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    params.add(mask.untyped_storage().data_ptr() if mask is not None else 0)
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = max(saved.get(ptr, 0), t.untyped_storage().nbytes())
        return t

    decoder = model.get_base_model().model
    x = torch.randn(sequences, seq_len, a.hidden, dtype=torch.bfloat16, requires_grad=True)
    positions = torch.arange(seq_len)[None].expand(sequences, seq_len)
    cos_sin = decoder.rotary_emb(x, positions)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        decoder.layers[0](x, position_embeddings=cos_sin, attention_mask=mask, position_ids=positions)
    return sum(saved.values()) / (sequences * seq_len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rank", type=int, default=32, help="LoRA rank")
    add_config_argument(
        parser,
        "--sequences",
        "mini_batch_size",
        help="sequences per micro-batch (--mini-batch-size; default: %(default)s)",
    )
    parser.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence")
    parser.add_argument("--completion-tokens", type=int, default=256, help="completion tokens per sequence")
    args = parser.parse_args()
    print(table(args.rank, Batch(args.sequences, args.seq_len, args.completion_tokens)))


if __name__ == "__main__":
    main()
