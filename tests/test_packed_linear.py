"""Packed oneDNN Linear layers for CPU inference: same numbers as torch's, the learner's log-probs kept."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from unstable_core.inference.hf.packed_linear import (  # noqa: E402
    PackedForward,
    pack_linear_layers,
    packing_available,
    unpack_linear_layers,
)

pytestmark = pytest.mark.skipif(
    not packing_available(), reason="this torch build has no oneDNN packed linear"
)
torch.set_num_threads(1)


def linears(model):
    return [m for m in model.modules() if type(m) is torch.nn.Linear]


@pytest.fixture
def model(tiny_model):
    from unstable_core.model_loading import load_causal_lm

    return load_causal_lm(tiny_model, device="cpu")


def test_packed_layers_give_the_logits_of_torchs_own(model):
    ids = torch.tensor([[5, 17, 99, 3, 250, 7], [8, 8, 1, 2, 3, 4]])
    with torch.inference_mode():
        plain = model(input_ids=ids).logits
        assert pack_linear_layers(model) == len(linears(model)) > 0
        assert all(isinstance(m.forward, PackedForward) for m in linears(model))  # still nn.Linear modules
        with torch.profiler.profile() as profile:
            packed = model(input_ids=ids).logits
        assert unpack_linear_layers(model) == len(linears(model))
        again = model(input_ids=ids).logits
    ran = {e.key: e.count for e in profile.key_averages()}
    assert ran.get("mkldnn::_linear_pointwise") == len(linears(model)) and "aten::linear" not in ran
    assert torch.allclose(plain, packed, atol=1e-5, rtol=1e-5)
    assert torch.equal(plain, again)


def test_a_packed_layer_follows_its_weight_and_leaves_gradients_to_torch():
    layer = torch.nn.Linear(32, 48)
    pack_linear_layers(layer)
    x = torch.randn(5, 32)
    with torch.no_grad():
        layer.weight.mul_(2.0)  # changed in place after packing: packed again on the next call
        assert torch.allclose(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), atol=1e-5)
        layer.weight = torch.nn.Parameter(torch.randn(48, 32))  # replaced
        assert torch.allclose(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), atol=1e-5)
    layer(x).sum().backward()  # with a gradient to track, torch's own op runs
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0


def test_a_write_through_data_is_never_served_from_the_old_packed_copy():
    """`.data` bypasses the version counter: `weight.data += d` (how peft merges LoRA), a copy into it, a
    write through an alias kept from before the last call, `weight.data = other`. Each served the weights
    packed before it (errors of 19-31 on a demo); now the layer computes with the weight as it is."""
    layer = torch.nn.Linear(32, 48)
    pack_linear_layers(layer)
    x = torch.randn(5, 32)

    def plain():
        return torch.nn.functional.linear(x, layer.weight.detach(), layer.bias.detach())

    with torch.no_grad():
        layer(x)
        layer.weight.data += 1.0
        assert torch.allclose(layer(x), plain(), atol=1e-5)
        layer.weight.data.copy_(torch.randn(48, 32))
        assert torch.allclose(layer(x), plain(), atol=1e-5)
        alias = layer.weight.data
        layer(x)
        alias.mul_(3.0)
        assert torch.allclose(layer(x), plain(), atol=1e-5)
        other = torch.randn(48, 32)
        layer.weight.data = other
        layer(x)
        other.add_(1.0)
        assert torch.allclose(layer(x), plain(), atol=1e-5)
    assert pack_linear_layers(layer) == 1  # packed again on request: the copy reads the weight as it is now
    with torch.no_grad():
        assert torch.allclose(layer(x), plain(), atol=1e-5)
    assert unpack_linear_layers(layer) == 1 and type(layer.weight) is torch.nn.Parameter


def test_a_peft_merge_into_packed_layers_gives_the_adapters_logits(model):
    """peft merges a LoRA into its base layer's weight through `.data`: the merged model must compute
    what the adapter computed unmerged, and the unmerged one the same again."""
    from peft import LoraConfig, get_peft_model

    pack_linear_layers(model)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    ids = torch.tensor([[5, 17, 99, 3, 250, 7]])
    with torch.inference_mode():
        adapted = peft_model(input_ids=ids).logits
        peft_model.merge_adapter()
        merged = peft_model(input_ids=ids).logits
        peft_model.unmerge_adapter()
        unmerged = peft_model(input_ids=ids).logits
    assert torch.allclose(merged, adapted, atol=1e-4) and torch.allclose(unmerged, adapted, atol=1e-4)


def test_the_backend_packs_on_cpu_and_records_what_the_learner_recomputes(tiny_model):
    """The transformers backend on CPU runs packed layers; the log-probs it records are those an unpacked
    model (the learner's kernels) computes for the same tokens."""
    from unstable_core.inference.hf.backend import TransformersBackend
    from unstable_core.model_loading import load_causal_lm
    from unstable_core.testing import plain_logprobs, sampled_steps

    backend = TransformersBackend(tiny_model, device="cpu")
    assert backend.packed_layers == len(linears(backend._pool.base_model))
    assert TransformersBackend(tiny_model, device="cpu", packed_linear=False).packed_layers == 0
    steps = sampled_steps(tiny_model, temperature=0.7, backend=backend)
    plain = load_causal_lm(tiny_model, device="cpu")
    for step in steps:
        recomputed = plain_logprobs(plain, step.prompt_ids, step.completion_ids, temperature=0.7)
        assert step.logprobs == pytest.approx(recomputed, abs=1e-5)


def test_a_frozen_packed_layer_passes_the_input_gradient_of_torchs_own():
    layer = torch.nn.Linear(32, 48).requires_grad_(False)
    x = torch.randn(2, 5, 32, requires_grad=True)
    torch.nn.functional.linear(x, layer.weight, layer.bias).pow(2).sum().backward()
    plain = x.grad.clone()
    x.grad = None
    assert pack_linear_layers(layer, frozen_only=True) == 1
    layer(x).pow(2).sum().backward()
    assert torch.allclose(x.grad, plain, atol=1e-5, rtol=1e-5)


def test_a_lora_learner_trains_through_packed_base_layers_with_torchs_gradients(tiny_model):
    """A LoRA model's frozen base layers are packed, its adapters are not; the adapters' gradients and the
    loss are those of torch's own kernels."""
    from peft import LoraConfig, get_peft_model

    from unstable_core.model_loading import load_causal_lm

    model = get_peft_model(
        load_causal_lm(tiny_model, device="cpu"),
        LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
        ),
    )
    ids = torch.tensor([[5, 17, 99, 3, 250, 7, 42, 9]])

    def loss_and_grads():
        model.zero_grad()
        loss = (
            torch.log_softmax(model(input_ids=ids).logits, dim=-1)[0, :-1].gather(-1, ids[0, 1:, None]).sum()
        )
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters() if p.requires_grad]

    plain_loss, plain_grads = loss_and_grads()
    frozen = [m for m in linears(model) if not m.weight.requires_grad]
    assert 0 < pack_linear_layers(model, frozen_only=True) == len(frozen) < len(linears(model))
    loss, grads = loss_and_grads()
    assert loss == pytest.approx(plain_loss, rel=1e-5)
    assert all(torch.allclose(g, p, atol=1e-5, rtol=1e-4) for g, p in zip(grads, plain_grads, strict=True))


def test_the_learner_packs_its_frozen_layers_on_cpu(tiny_model, tmp_path):
    from unstable_core import plugins

    learner = plugins.load("learner", "reinforce").create(tiny_model, device="cpu", run_dir=tmp_path)
    frozen = [m for m in linears(learner.model) if not m.weight.requires_grad]
    assert learner.packed_layers == len(frozen) > 0


def test_a_deep_copy_of_a_packed_model_computes_with_its_own_weights():
    import copy

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    pack_linear_layers(model)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(-1.0)
    x = torch.randn(3, 16)
    with torch.inference_mode():
        assert torch.allclose(
            twin(x),
            torch.nn.functional.linear(
                torch.nn.functional.linear(x, twin[0].weight, twin[0].bias), twin[1].weight, twin[1].bias
            ),
            atol=1e-5,
        )
        assert not torch.allclose(twin(x), model(x), atol=1e-3)


def test_the_packing_probe_leaves_the_global_rng_alone():
    """A seeded learner built first in a process drew other LoRA weights than one built second, because this
    probe drew from the global RNG on its first call (two data-parallel ranks then started apart)."""
    import torch

    from unstable_core.inference.hf.packed_linear import packing_available

    packing_available.cache_clear()
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    packing_available()
    assert torch.equal(torch.random.get_rng_state(), before)
