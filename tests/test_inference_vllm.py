"""The vLLM backend without vLLM (it cannot run here): the clear error, the config mapping, and the
request building and output mapping, against FAKE vLLM classes injected through `VLLMApi`."""

import dataclasses
import importlib.util
import os
from types import SimpleNamespace

import pytest

from unstable_core.errors import UnstableError
from unstable_core.inference.base import GenerationRequest, SamplingParams
from unstable_core.inference.vllm import VLLM_MISSING, VLLMApi, VLLMBackend, map_vllm_config

REFERENCE_CFG = {
    "model_name": "Qwen/Qwen3-1.7B-Base",
    "temperature": 0.6,
    "max_tokens": 4096,
    "max_parallel_seq": 128,
    "max_loras": 8,
    "lora_config": {
        "lora_rank": 32,
        "lora_alpha": 32,
        "lora_dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"],
    },
    "max_model_len": 8192,
}


@dataclasses.dataclass
class FakeEngineArgs:
    model: str
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    max_model_len: int | None = None
    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.9
    max_cpu_loras: int | None = None
    logprobs_mode: str = "unset"  # so the test sees that the backend asks for processed (tempered) log-probs


@dataclasses.dataclass
class FakeSamplingParams:
    temperature: float
    top_p: float
    max_tokens: int
    seed: int | None
    logprobs: int | None


@dataclasses.dataclass
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


class FakeEngine:
    """Records each generate call; answers with prompt ids reversed, and stops at token 0 (its 'EOS')."""

    created_with = None

    def __init__(self):
        self.calls = []
        self.removed = []

    @classmethod
    def from_engine_args(cls, args):
        engine = cls()
        engine.args = args
        return engine

    async def generate(self, prompt, params, request_id, lora_request=None):
        self.calls.append(
            SimpleNamespace(prompt=prompt, params=params, request_id=request_id, lora=lora_request)
        )
        if prompt["prompt_token_ids"][0] == 999:
            raise ValueError("engine refused")
        ids = list(reversed(prompt["prompt_token_ids"]))
        if 0 in ids:
            ids, reason = ids[: ids.index(0) + 1], "stop"
        else:
            ids, reason = ids[: params.max_tokens], "length"
        partial = SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=ids[:1], text="", logprobs=[], finish_reason=None)]
        )
        yield partial
        logprobs = [
            {t: SimpleNamespace(logprob=-0.5 * (k + 1)), t + 1: SimpleNamespace(logprob=-9.0)}
            for k, t in enumerate(ids)
        ]
        yield SimpleNamespace(
            outputs=[
                SimpleNamespace(
                    token_ids=tuple(ids), text=f"text{ids}", logprobs=logprobs, finish_reason=reason
                )
            ]
        )

    async def remove_lora(self, lora_id):
        self.removed.append(lora_id)


FAKE_API = VLLMApi(
    engine_args=FakeEngineArgs,
    engine=FakeEngine,
    sampling_params=FakeSamplingParams,
    lora_request=FakeLoRARequest,
    tokens_prompt=dict,
)


@pytest.fixture
def backend():
    b = VLLMBackend("Qwen/Qwen3-1.7B-Base", max_model_len=16, max_loras=2, max_cpu_loras=2, api=FAKE_API)
    yield b
    b._release()


def make_adapter_dir(folder):
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return str(folder)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_missing_vllm_says_how_to_install():
    with pytest.raises(UnstableError) as info:
        VLLMBackend("smollm2-135m")
    assert (
        str(info.value)
        == VLLM_MISSING
        == "the vllm backend needs vLLM: pip install vllm (Linux with a CUDA GPU)"
    )


def test_reference_config_mapping():
    mapped = map_vllm_config(REFERENCE_CFG)
    assert mapped.backend_kwargs == {
        "model": "Qwen/Qwen3-1.7B-Base",
        "max_batch_size": 128,
        "max_loras": 8,
        "max_model_len": 8192,
        "max_lora_rank": 32,
    }
    assert mapped.sampling == SamplingParams(temperature=0.6, max_tokens=4096)
    no_limit = map_vllm_config({**REFERENCE_CFG, "max_tokens": None})
    assert no_limit.sampling.max_tokens == 8192  # clamped per request to what the context leaves
    with pytest.raises(UnstableError, match="max_parallel_seqs"):
        map_vllm_config({**REFERENCE_CFG, "max_parallel_seqs": 4})
    with pytest.raises(UnstableError, match="lora_rnk"):
        map_vllm_config({**REFERENCE_CFG, "lora_config": {"lora_rnk": 8}})
    with pytest.raises(UnstableError, match="model_name"):
        map_vllm_config({"temperature": 0.5})
    with pytest.raises(UnstableError, match="temperature"):
        map_vllm_config({**REFERENCE_CFG, "temperature": -1})


def test_engine_args_from_vllm_config():
    b = VLLMBackend.from_vllm_config(REFERENCE_CFG, api=FAKE_API)
    try:
        assert b._engine.args == FakeEngineArgs(
            model="Qwen/Qwen3-1.7B-Base",
            enable_lora=True,
            max_loras=8,
            max_lora_rank=32,
            max_model_len=8192,
            max_num_seqs=128,
            gpu_memory_utilization=0.9,
            logprobs_mode="processed_logprobs",
        )
        assert b.default_params.temperature == 0.6 and b.max_batch_size == 128
    finally:
        b._release()


def test_cpu_device_is_refused():
    with pytest.raises(UnstableError, match="CUDA"):
        VLLMBackend("Qwen/Qwen3-1.7B-Base", device="cpu", api=FAKE_API)


def test_request_building_and_output_mapping(backend):
    params = SamplingParams(temperature=0.3, top_p=0.8, max_tokens=20, seed=4)
    out = backend.generate_batch([GenerationRequest((5, 6, 7, 8, 9, 10), params=params)])[0]
    call = backend._engine.calls[-1]
    assert call.prompt == {"prompt_token_ids": [5, 6, 7, 8, 9, 10]}
    # 16 - 6 prompt tokens = 10 new tokens at most; logprobs=0: only the sampled token's log-prob
    assert call.params == FakeSamplingParams(temperature=0.3, top_p=0.8, max_tokens=10, seed=4, logprobs=0)
    assert call.lora is None and call.request_id.startswith("unstable-")
    assert out.token_ids == [10, 9, 8, 7, 6, 5] and out.finish_reason == "length"
    assert out.logprobs == [-0.5, -1.0, -1.5, -2.0, -2.5, -3.0]
    assert out.text == "text[10, 9, 8, 7, 6, 5]"
    stop = backend.generate_batch([GenerationRequest((3, 0, 4))])[0]
    assert stop.token_ids == [4, 0] and stop.finish_reason == "stop"


def test_lora_requests_have_stable_ids_and_lru(backend, tmp_path):
    a, b, c = (make_adapter_dir(tmp_path / n) for n in "abc")
    outs = backend.generate_batch([GenerationRequest((1, 2), lora_path=p) for p in (a, b, a)])
    assert all(o.finish_reason == "length" for o in outs)
    loras = [call.lora for call in backend._engine.calls]
    assert loras[0] == loras[2] == FakeLoRARequest("adapter_1", 1, a)
    assert loras[1] == FakeLoRARequest("adapter_2", 2, b)
    backend.generate_batch([GenerationRequest((1, 2), lora_path=b)])
    backend.generate_batch(
        [GenerationRequest((1, 2), lora_path=c)]
    )  # capacity 2: a, least recently used, goes
    assert backend._engine.calls[-1].lora.lora_int_id == 3 and backend._engine.removed == [1]
    os.utime(os.path.join(b, "adapter_model.safetensors"), ns=(1, 1))  # rewritten folder: a fresh id
    backend.generate_batch([GenerationRequest((1, 2), lora_path=b)])
    assert backend._engine.calls[-1].lora.lora_int_id == 4 and 2 in backend._engine.removed


def test_per_request_errors(backend, tmp_path):
    outs = backend.generate_batch(
        [
            GenerationRequest(tuple(range(1, 17))),
            GenerationRequest((1, 2), lora_path=str(tmp_path / "missing")),
            GenerationRequest((999, 1)),
            GenerationRequest((1, 2)),
        ]
    )
    assert [o.finish_reason for o in outs] == ["error", "error", "error", "length"]
    assert "max_model_len=16" in outs[0].error
    assert "does not exist" in outs[1].error
    assert "engine refused" in outs[2].error
    assert len(backend._engine.calls) == 2  # the first two never reached the engine
