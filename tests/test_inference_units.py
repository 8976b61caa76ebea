"""Unit tests of the inference pieces that need no model: messages, sampling maths, stats, LRU, batching."""

import asyncio

import pytest
import torch

from unstable_core.errors import UnstableError
from unstable_core.inference.adapters import AdapterLRU, AdapterSlot, adapter_problem
from unstable_core.inference.base import (
    GenerationOutput,
    GenerationRequest,
    InferenceBackend,
    SamplingParams,
    token_budget,
)
from unstable_core.inference.sampling import sample_tokens, sampling_logprobs, top_p_filter
from unstable_core.inference.stats import ThroughputMeter


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_sampling_params_reject_bad_values(kwargs, word):
    with pytest.raises(UnstableError, match=word):
        SamplingParams(**kwargs)


def test_request_converts_ids_and_path():
    request = GenerationRequest([1, 2, 3], lora_path=None)
    assert request.prompt_ids == (1, 2, 3)
    assert GenerationRequest((4,), lora_path=__import__("pathlib").Path("/x/y")).lora_path == "/x/y"


def test_token_budget_clamps_and_refuses():
    params = SamplingParams(max_tokens=8)
    assert token_budget(GenerationRequest(range(10), params=params), 16) == (6, None)
    assert token_budget(GenerationRequest(range(4), params=params), 16) == (8, None)
    budget, problem = token_budget(GenerationRequest(range(16), params=params), 16)
    assert budget == 0 and "max_model_len=16" in problem
    assert "empty prompt" in token_budget(GenerationRequest(()), 16)[1]


def test_top_p_filter_keeps_smallest_set_reaching_p():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]] * 3)
    kept = top_p_filter(probs, torch.tensor([0.7, 0.5, 1.0]))
    # 0.7: 0.5 (mass above 0) and 0.3 (mass above 0.5 < 0.7) stay; 0.15 has 0.8 above it
    assert kept[0].tolist() == pytest.approx([0.0, 0.5, 0.0, 0.3])
    # 0.5: the mass above 0.3 is exactly 0.5, not < 0.5
    assert kept[1].tolist() == pytest.approx([0.0, 0.5, 0.0, 0.0])
    assert kept[2].tolist() == pytest.approx([0.15, 0.5, 0.05, 0.3])


def test_the_nucleus_is_measured_against_the_rows_own_total():
    """A float32 softmax over a large vocabulary sums to 1 + 1e-5: a token whose mass above is 2e-6 under
    top_p belongs to the nucleus (vLLM keeps it), though its mass above exceeds top_p in absolute terms."""
    from unstable_core.inference.sampling import nucleus_mask

    probs = torch.tensor([[0.5, 0.399998, 0.100002]], dtype=torch.float64) * (1 + 1e-5)
    assert float(probs[0, :2].sum()) > 0.9  # compared with 1, the third token would be cut
    assert nucleus_mask(probs, torch.tensor([0.9], dtype=torch.float64)).tolist() == [[True, True, True]]
    exact = torch.tensor([[0.5, 0.4, 0.1]], dtype=torch.float64)
    assert nucleus_mask(exact, torch.tensor([0.9], dtype=torch.float64)).tolist() == [[True, True, False]]


def test_sampling_logprobs_are_renormalised_over_the_nucleus():
    logits = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]] * 3))
    logp = sampling_logprobs(logits, torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0.7, 1.0, 0.7]))
    # top_p 0.7 keeps 0.5 and 0.3, renormalised by 0.8; the others cannot be sampled
    assert logp[0].exp().tolist() == pytest.approx([0.0, 0.625, 0.0, 0.375])
    assert logp[1].exp().tolist() == pytest.approx([0.15, 0.5, 0.05, 0.3])  # top_p 1: the tempered softmax
    assert logp[2].exp().tolist() == pytest.approx([0.15, 0.5, 0.05, 0.3])  # greedy: T = 1, whole vocabulary
    # a target at the nucleus' edge (here outside it) is kept, never -inf
    kept = sampling_logprobs(logits[:1], 1.0, 0.7, targets=torch.tensor([0]))
    assert kept[0].exp().tolist() == pytest.approx([0.15 / 0.95, 0.5 / 0.95, 0.0, 0.3 / 0.95])


def test_sample_tokens_refuses_logits_that_are_not_finite():
    logits = torch.tensor([[0.0, float("nan"), 1.0]])
    with pytest.raises(ValueError, match="NaN or inf"):
        sample_tokens(logits, [SamplingParams(temperature=1.0)], [None])


def test_sample_tokens_greedy_nucleus_and_seed():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]] * 3)
    greedy = SamplingParams(temperature=0.0)
    narrow = SamplingParams(temperature=5.0, top_p=0.01)  # only the top token survives the nucleus
    wide = SamplingParams(temperature=5.0)
    tokens = sample_tokens(logits, [greedy, narrow, wide], [None, torch.Generator().manual_seed(0), None])
    assert tokens[:2].tolist() == [1, 1]
    draws = [sample_tokens(logits[:1], [wide], [torch.Generator().manual_seed(7)]).item() for _ in range(2)]
    assert draws[0] == draws[1]
    many = {sample_tokens(logits[:1], [wide], [torch.Generator().manual_seed(s)]).item() for s in range(40)}
    assert len(many) > 1  # temperature 5 spreads the draws


def test_throughput_meter_window():
    now = [4.0]
    meter = ThroughputMeter(window_s=10.0, clock=lambda: now[0])
    meter.record_batch(n_requests=4, n_tokens=100, n_errors=1, start=0.0, end=2.0)
    meter.record_batch(n_requests=2, n_tokens=50, n_errors=0, start=1.0, end=4.0)
    stats = meter.stats()
    assert stats["tokens_per_s"] == pytest.approx(150 / 4.0)
    assert stats["total_tokens"] == 150 and stats["batches"] == 2 and stats["errors"] == 1
    assert stats["mean_batch_size"] == pytest.approx(3.0)
    now[0] = 13.0  # the first batch ended before 13 - 10 = 3: out of the window
    assert meter.tokens_per_s() == pytest.approx(50 / 12.0)
    now[0] = 30.0
    assert meter.tokens_per_s() == 0.0


def test_adapter_lru_evicts_least_recent_but_kept():
    lru = AdapterLRU(capacity=2)
    for i, path in enumerate("abc"):
        lru.insert(path, AdapterSlot(handle=i, version=0))
    assert lru.touch("a").handle == 0  # order now b, c, a
    evicted = lru.overflow(keep={"b"})
    assert [p for p, _ in evicted] == ["c"]
    assert lru.paths() == ["b", "a"]
    assert lru.touch("zzz") is None


def test_adapter_problem(tmp_path):
    assert "does not exist" in adapter_problem(str(tmp_path / "missing"))
    (tmp_path / "adapter_config.json").write_text("{}")
    assert "adapter_model.safetensors" in adapter_problem(str(tmp_path))
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    assert adapter_problem(str(tmp_path)) is None


class EchoBackend(InferenceBackend):
    """A backend without a model, to test the base class: echoes the prompt, or raises on a marker."""

    def __init__(self, **kwargs):
        super().__init__("echo", **kwargs)
        self.batches: list[int] = []

    @property
    def tokenizer(self):
        return None

    def generate_batch(self, requests):
        self.batches.append(len(requests))
        if any(r.prompt_ids == (666,) for r in requests):
            raise RuntimeError("boom")
        if any(r.prompt_ids == (777,) for r in requests):
            return []
        return [
            GenerationOutput("", list(r.prompt_ids), [0.0] * len(r.prompt_ids), "length") for r in requests
        ]

    def _release(self):
        pass


def test_batcher_coalesces_and_splits_at_max_batch_size():
    backend = EchoBackend(max_batch_size=3, gather_ms=100.0)

    async def main():
        return await asyncio.gather(*(backend.generate(GenerationRequest((i, i))) for i in range(7)))

    outputs = asyncio.run(main())
    assert [o.token_ids for o in outputs] == [[i, i] for i in range(7)]
    assert backend.batches == [3, 3, 1]
    stats = backend.stats()
    assert stats["batches"] == 3 and stats["total_tokens"] == 14 and stats["queued"] == 0


def test_failing_batch_becomes_error_outputs_and_loop_survives():
    backend = EchoBackend(gather_ms=50.0)

    async def main():
        bad = await asyncio.gather(
            backend.generate(GenerationRequest((1,))), backend.generate(GenerationRequest((666,)))
        )
        short = await backend.generate(GenerationRequest((777,)))
        good = await backend.generate(GenerationRequest((5,)))
        return bad, short, good

    bad, short, good = asyncio.run(main())
    assert [o.finish_reason for o in bad] == ["error", "error"]
    assert "RuntimeError: boom" in bad[0].error
    assert short.finish_reason == "error" and "0 outputs for 1 requests" in short.error
    assert good.token_ids == [5]
    assert backend.stats()["errors"] == 3


def test_generate_rejects_wrong_type_and_closed_backend():
    backend = EchoBackend()

    async def main():
        with pytest.raises(UnstableError, match="GenerationRequest"):
            await backend.generate([1, 2])
        await backend.close()
        with pytest.raises(UnstableError, match="closed"):
            await backend.generate(GenerationRequest((1,)))

    asyncio.run(main())


def test_unknown_backend_option_is_named():
    with pytest.raises(UnstableError, match="temprature"):
        EchoBackend(temprature=0.5)
