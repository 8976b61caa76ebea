"""The FLOPs of one learner update, counted from the model's shapes and the batch's token counts, and the
share of the update's time each of its phases takes: `benchmarks/learner.py`'s FLOP/s rows.

Counted, as 2 FLOPs a multiply-add, on real tokens (padding left out) of every micro-batch as the learner
cuts them (`BaseLearner.optimizer_step`):

- forward, per decoder layer: the frozen projections (2 in x out a token), each LoRA (2 r (in + out) a
  token), attention's QK^T and AV over the causal pairs of each row (2 x 2 x pairs x heads x head_dim); a
  prompt prefix that every row of a micro-batch shares runs once (`learners/shared_prefix.py`), so its
  tokens and pairs count once;
- the LM head, fp32 [N, H] x [H, V] at the N positions that predict a completion token (`head_logprobs`),
  or at every real position where the head is not a plain Linear (`policy_logits`);
- backward: each frozen projection's input gradient only (as its forward: frozen weights get none), except
  layer 0's q, k and v without gradient checkpointing, whose input (the embeddings) needs no gradient;
  each LoRA's weight and input gradients (twice its forward, less the input's where none is needed);
  attention's dQ, dK, dV and dP (twice its forward); the head's input gradient (as its forward);
- with gradient checkpointing, every decoder layer's forward once more in the backward pass, except its
  last LoRA B (down_proj's): non-reentrant checkpointing stops recomputing once it holds every tensor the
  backward needs (torch's early stop), and that product's output is not one of them.

Not counted: the embedding lookup, norms, rotary embeddings, SiLU, residual adds, the attention softmax,
the log-softmax over the vocabulary, the loss, gradient clipping and AdamW (elementwise work: the phase
timers show its time), nor what kernels compute and discard (padded positions, attention's masked half).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import attrs
from memory_arithmetic import Arch, projections

NO_INPUT_GRADIENT = ("q_proj", "k_proj", "v_proj")  # layer 0's, reading the embeddings' norm


def causal_pairs(n: int) -> int:
    """(query, key) pairs of a causal attention over n tokens: key position <= query position."""
    return n * (n + 1) // 2


@attrs.frozen
class MicroBatch:
    """The token counts of one micro-batch: each row's real tokens, the positions where the head runs
    (those predicting a completion token) and the prompt prefix that all rows share and the decoder runs once."""

    lengths: tuple[int, ...]
    completion: int
    shared: int = 0

    @property
    def tokens(self) -> int:
        """Real token positions the decoder runs."""
        return self.shared + sum(n - self.shared for n in self.lengths)

    @property
    def positions(self) -> int:
        """Positions the decoder runs, padding included (right-padded to the longest row)."""
        return self.shared + len(self.lengths) * (max(self.lengths) - self.shared)

    @property
    def pairs(self) -> int:
        """Causal attention pairs over real tokens, the shared prefix's once."""
        prefix = causal_pairs(self.shared)
        return prefix + sum(causal_pairs(n) - prefix for n in self.lengths)


@attrs.frozen
class UpdateFlops:
    """The FLOPs of one update by the phase that computes them."""

    forward: int  # the decoder layers: frozen projections, LoRA, attention
    head: int  # the LM head's forward
    backward: int  # every input and LoRA gradient, the head's included
    recompute: int  # gradient checkpointing's second forward (0 without it)
    attention: int  # of those, attention's QK^T and AV products and their gradients

    @property
    def total(self) -> int:
        """All of them."""
        return self.forward + self.head + self.backward + self.recompute


def arch_of(config: Any) -> Arch:
    """The shape of a dense Llama-like decoder from its transformers config."""
    heads = config.num_attention_heads
    return Arch(
        hidden=config.hidden_size,
        layers=config.num_hidden_layers,
        intermediate=config.intermediate_size,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        vocab=config.vocab_size,
        tied=bool(getattr(config, "tie_word_embeddings", False)),
    )


def update_flops(
    arch: Arch,
    rank: int,
    targets: Sequence[str],
    micro_batches: Sequence[MicroBatch],
    checkpointing: bool,
    plain_head: bool = True,
) -> UpdateFlops:
    """The FLOPs of one update over `micro_batches` (see the module docstring for what counts); `targets`:
    the LoRA's target modules (those that are not decoder projections are not counted)."""
    proj = projections(arch)
    lora = {name: (rank * n, rank * m) for name, (n, m) in proj.items() if name in targets}  # A, B
    base = sum(n * m for n, m in proj.values())  # multiply-adds a token, one layer
    adapters = sum(a + b for a, b in lora.values())
    attention = arch.heads * arch.head_dim  # multiply-adds a causal pair, QK^T or AV, one layer
    layers = arch.layers
    forward = head = backward = recompute = pairs_done = 0
    for mb in micro_batches:
        tokens, pairs = mb.tokens, mb.pairs
        pairs_done += pairs * (4 if checkpointing else 3)  # forward, backward (twice), recompute
        # the head's rows: completion positions, or every real position when it runs as the model runs it
        rows = mb.completion if plain_head else sum(mb.lengths)
        layer_forward = tokens * (base + adapters) + 2 * pairs * attention
        forward += layers * layer_forward
        head += rows * arch.hidden * arch.vocab
        skipped = (
            0 if checkpointing else sum(n * m for name, (n, m) in proj.items() if name in NO_INPUT_GRADIENT)
        )
        skipped += (
            0 if checkpointing else sum(a for name, (a, _) in lora.items() if name in NO_INPUT_GRADIENT)
        )
        backward += layers * (tokens * (base + 2 * adapters) + 4 * pairs * attention) - tokens * skipped
        backward += rows * arch.hidden * arch.vocab
        if checkpointing:
            recompute += layers * (layer_forward - tokens * lora.get("down_proj", (0, 0))[1])
    return UpdateFlops(
        forward=2 * forward,
        head=2 * head,
        backward=2 * backward,
        recompute=2 * recompute,
        attention=2 * layers * 2 * pairs_done * attention,
    )


def micro_batches_of(learner: Any, batch: Sequence[Any]) -> list[MicroBatch]:
    """The token counts of the micro-batches `learner.update(batch)` runs, cut as its `optimizer_step` cuts
    them, with the prefix its decoder pass would share."""
    from unstable_core.learners.shared_prefix import can_share, micro_batch_order, shared_length
    from unstable_core.model_loading import plain_linear_head

    base = learner.model.get_base_model()
    sharing = plain_linear_head(base) and can_share(base.get_decoder())
    samples = sorted(learner.prepare_batch(learner.drop_too_long(list(batch))), key=micro_batch_order)
    size = learner.config.mini_batch_size
    result = []
    for lo in range(0, len(samples), size):
        tokens = learner.collate(samples[lo : lo + size])
        result.append(
            MicroBatch(
                lengths=tuple(int(n) for n in tokens.attention_mask.sum(dim=-1)),
                completion=int(tokens.target_mask.sum()),
                shared=shared_length(tokens.input_ids, tokens.last_prompt_index) if sharing else 0,
            )
        )
    return result


def learner_flops(learner: Any, batch: Sequence[Any]) -> tuple[UpdateFlops, list[MicroBatch]]:
    """`update_flops` of `learner.update(batch)`, from the learner's model, LoRA and settings."""
    from unstable_core.model_loading import plain_linear_head

    base = learner.model.get_base_model()
    micro = micro_batches_of(learner, batch)
    counted = update_flops(
        arch_of(base.config),
        learner.config.lora_config["lora_rank"],
        learner.target_modules,
        micro,
        checkpointing=learner.config.gradient_checkpointing,
        plain_head=plain_linear_head(base),
    )
    return counted, micro


# ---- the phases of an update ---------------------------------------------------------------------

#: phase name -> the UpdateFlops field it computes (None: no FLOPs counted)
PHASES: dict[str, str | None] = {
    "collate": None,
    "decoder forward": "forward",
    "LM head (fp32 matmul)": "head",
    "log-softmax (tempered)": None,
    "backward": "backward",
    "recompute (checkpointing)": "recompute",
    "gradient sum (float64)": None,
    "clip grad norm": None,
    "AdamW step": None,
    "the rest": None,
}


class PhaseTimer:
    """Wall seconds spent in each phase of `learner.update` while `timing(learner)` is active: functions and
    modules the update calls are wrapped with timers for that time (nested phases are not double-counted:
    the head's time leaves out the log-softmax's, the backward's the recompute's)."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.in_backward = False

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, its calls' time added to phase `name`."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.sync()
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                self.seconds[name] += time.perf_counter() - start

        return timed

    def hook_module(self, module: Any, name: str, during_backward: bool) -> list[Any]:
        """Forward hooks adding `module`'s forward time to `name`, counting only the calls made inside
        (`during_backward`) or outside the backward pass."""
        started: list[float] = []

        def before(*_: Any) -> None:
            if self.in_backward == during_backward:
                self.sync()
                started.append(time.perf_counter())

        def after(*_: Any) -> None:
            if self.in_backward == during_backward and started:
                self.sync()
                self.seconds[name] += time.perf_counter() - started.pop()

        # always_call: checkpointing's early stop ends a recompute by raising inside the last child's forward
        return [
            module.register_forward_pre_hook(before),
            module.register_forward_hook(after, always_call=True),
        ]

    def backward(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`Tensor.backward`, timed as the backward phase and marking the recompute inside it."""
        timed = self.wrap("backward", fn)

        def marked(*args: Any, **kwargs: Any) -> Any:
            self.in_backward = True
            try:
                return timed(*args, **kwargs)
            finally:
                self.in_backward = False

        return marked


@contextmanager
def _patched(owner: Any, attribute: str, value: Any) -> Iterator[None]:
    original = getattr(owner, attribute)
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


@contextmanager
def timing(learner: Any, timer: PhaseTimer) -> Iterator[None]:
    """Wrap what `learner.update` calls with `timer`'s phase timers; undone on exit."""
    import torch

    import unstable_core.learners.base as learner_base
    import unstable_core.learners.batch as learner_batch
    from unstable_core.learners.data_parallel import GradientSum

    decoder = learner.model.get_base_model().get_decoder()
    with ExitStack() as stack:
        patches = [
            (learner, "collate", timer.wrap("collate", learner.collate)),
            (learner_base, "head_logprobs", timer.wrap("LM head (fp32 matmul)", learner_base.head_logprobs)),
            (
                learner_batch,
                "tempered_logprobs",
                timer.wrap("log-softmax (tempered)", learner_batch.tempered_logprobs),
            ),
            (torch.Tensor, "backward", timer.backward(torch.Tensor.backward)),
            (GradientSum, "add", timer.wrap("gradient sum (float64)", GradientSum.add)),
            (GradientSum, "write", timer.wrap("gradient sum (float64)", GradientSum.write)),
            (torch.nn.utils, "clip_grad_norm_", timer.wrap("clip grad norm", torch.nn.utils.clip_grad_norm_)),
        ]
        patches += [(opt, "step", timer.wrap("AdamW step", opt.step)) for opt in learner.optimizers.values()]
        for owner, attribute, value in patches:
            stack.enter_context(_patched(owner, attribute, value))
        handles = timer.hook_module(decoder, "decoder forward", during_backward=False)
        for layer in decoder.layers:  # checkpointing reruns a layer's `forward`: its children's hooks fire
            for child in layer.children():
                handles += timer.hook_module(child, "recompute (checkpointing)", during_backward=True)
        stack.callback(lambda: [h.remove() for h in handles])
        yield


def phase_seconds(
    learner: Any, batch: Sequence[Any], repeats: int, sync: Callable[[], None]
) -> dict[str, float]:
    """The median seconds of each phase over `repeats` timed updates, "total" the median update; "the rest"
    is each update's time outside the timed phases (sorting, the loss, importance weights, metrics)."""
    per_update: list[dict[str, float]] = []
    for _ in range(repeats):
        timer = PhaseTimer(sync)
        with timing(learner, timer):
            sync()
            start = time.perf_counter()
            learner.update(list(batch))
            sync()
            total = time.perf_counter() - start
        seconds = dict(timer.seconds)
        # nested phases: the head's time holds the log-softmax's, the backward's the recompute's
        seconds["LM head (fp32 matmul)"] -= seconds["log-softmax (tempered)"]
        seconds["backward"] -= seconds["recompute (checkpointing)"]
        seconds["the rest"] = total - sum(v for k, v in seconds.items() if k != "the rest")
        seconds["total"] = total
        per_update.append(seconds)
    return {name: statistics.median(s[name] for s in per_update) for name in per_update[0]}


def top_ops(learner: Any, batch: Sequence[Any], rows: int = 15) -> str:
    """torch.profiler's table of the `rows` ops with the most self CPU time in one `learner.update(batch)`:
    which kernels the phases' time is spent in."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        learner.update(list(batch))
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=50)


# ---- the report ------------------------------------------------------------------------------------


def matmul_peaks(arch: Arch, rows: int) -> dict[str, float]:
    """fp32 FLOP/s of this process's threads at the update's matmul shapes, [rows, H] x [H, H] and
    [rows, H] x [H, I], of torch.matmul and of oneDNN's packed linear (the kernel of the frozen layers),
    keyed "[rows, H] x [H, N] kernel"."""
    from rollout_alone import best_matmul_flops

    each: dict[str, float] = {}
    for width in (arch.hidden, arch.intermediate):
        for kernel, flops in best_matmul_flops(rows, arch.hidden, width)[1].items():
            each[f"[{rows}, {arch.hidden}] x [{arch.hidden}, {width}] {kernel}"] = flops
    return each


def report(
    counted: UpdateFlops,
    micro: Sequence[MicroBatch],
    update_s: float,
    peaks: dict[str, float],
    phases: dict[str, float],
    threads: int,
) -> list[str]:
    """The lines of the FLOP/s table: the count, the peak (the best of `peaks`; none: not measured, no
    ratios), achieved / peak, and each phase's share."""
    giga = 1e9
    peak = max(peaks.values(), default=float("nan"))
    tokens, positions = sum(m.tokens for m in micro), sum(m.positions for m in micro)
    achieved = counted.total / update_s
    each = ", ".join(f"{k} {v / giga:.1f}" for k, v in peaks.items())
    measured = f"{each} GFLOP/s" if peaks else "not measured (the CPU's kernels only)"
    lines = [
        f"FLOP/s of learner.update against the fp32 matmul peak (both in this process, torch threads={threads})",
        f"counted: {counted.total / giga:.3f} GFLOP an update = decoder forward {counted.forward / giga:.3f} "
        f"+ LM head {counted.head / giga:.3f} + backward {counted.backward / giga:.3f} + recompute "
        f"{counted.recompute / giga:.3f} (attention {counted.attention / giga:.3f} of them); "
        f"{tokens:,} real tokens of {positions:,} decoder positions ({1 - tokens / positions:.1%} padding), "
        f"head at {sum(m.completion for m in micro):,}",
        f"peak:     {measured}",
        f"achieved: {achieved / giga:.1f} GFLOP/s ({counted.total / giga:.3f} GFLOP / {update_s * 1000:.1f} ms, "
        f"the median update above) = {achieved / peak:.2f} of the peak {peak / giga:.1f} GFLOP/s",
        f"{'phase (timed updates, medians)':<32} {'ms':>8} {'share':>7} {'GFLOP':>8} {'GFLOP/s':>8} {'of peak':>8}",
    ]
    total = phases["total"]
    for name, field in [*PHASES.items(), ("total", "total")]:
        flops = getattr(counted, field) if field else 0
        seconds = phases[name]
        row = f"{name:<32} {seconds * 1000:8.1f} {seconds / total:7.1%}"
        if flops:
            rate = flops / seconds if seconds > 0 else float("nan")
            row += f" {flops / giga:8.3f} {rate / giga:8.1f} {rate / peak:8.2f}"
        lines.append(row)
    return lines
