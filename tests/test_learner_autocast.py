"""`learner_autocast`: on CPU the learner's decoder runs in bfloat16 while what it trains and reads stays
float32, and a learner so run still passes the learning check. Where this CPU has no bfloat16 kernels a run
falls back to float32; the tests of the bf16 path then run it emulated (`bf16_kernels`), slower, not wronger."""

import pytest
import torch

from unstable_core.learners import precision
from unstable_core.plugins import get_registry
from unstable_core.testing import check_learner_learns


@pytest.fixture
def bf16_kernels(monkeypatch):
    """The bf16 path on any CPU: where oneDNN has no bf16 kernels, emulated."""
    monkeypatch.setattr(precision, "native_bf16", lambda: True)


def scorer(import_benchmark, model, tmp_path, autocast):
    learner = (
        import_benchmark("learner_autocast")
        .scorer_class()
        .create(
            model, device="cpu", run_dir=tmp_path, batch_size=4, mini_batch_size=4, learner_autocast=autocast
        )
    )
    learner.initialize_algorithm()
    learner.found = []
    return learner


def step_dtypes(learner, states):
    """One optimizer step through the learner's own path: the dtypes its decoder's layers put out, the
    scores' dtype and values, and the LoRA gradients' dtypes just before AdamW."""
    seen, grads = set(), set()
    decoder = learner.model.get_base_model().get_decoder()
    hooks = [
        m.register_forward_hook(lambda m, i, o: seen.add(o.dtype))
        for m in decoder.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    opt = learner.optimizers["policy"]
    original = opt.step
    opt.step = lambda *a, **k: (
        grads.update(p.grad.dtype for g in opt.param_groups for p in g["params"] if p.grad is not None),
        original(*a, **k),
    )[1]
    try:
        learner.optimizer_step_on([states])
    finally:
        opt.step = original
        for h in hooks:
            h.remove()
    return seen, learner.found[-1], grads


def test_the_decoder_runs_in_bf16_and_the_scores_and_gradients_stay_float32(
    import_benchmark, tiny_model, tmp_path, bf16_kernels
):
    import argparse

    states = import_benchmark("legal_answers").make_states(
        argparse.Namespace(states=4, answers=3, frame=20, own_prompt=12, answer_len=2)
    )
    plain, cast = (
        scorer(import_benchmark, tiny_model, tmp_path / name, autocast)
        for name, autocast in (("a", False), ("b", True))
    )
    assert (plain.autocast, cast.autocast) == (False, True)
    assert plain.packed_layers > 0 and cast.packed_layers == 0  # packed fp32 kernels would bypass autocast
    seen32, scores32, grads32 = step_dtypes(plain, states)
    seen16, scores16, grads16 = step_dtypes(cast, states)
    assert torch.bfloat16 in seen16 and torch.bfloat16 not in seen32
    assert scores16.dtype == scores32.dtype == torch.float32  # the LM head's product is float32
    assert grads16 == grads32 == {torch.float32}
    assert torch.allclose(scores16, scores32, atol=0.05)  # the same function, up to bf16's rounding
    assert not torch.equal(scores16, scores32)
    assert all(p.dtype == torch.float32 for p in cast.trainable_parameters())


@pytest.mark.parametrize("name", ["reinforce", "ppo"])
def test_a_learner_under_bf16_autocast_learns_the_letter_game(name, tmp_path, bf16_kernels):
    result = check_learner_learns(get_registry().load("learner", name), tmp_path, autocast=True)
    print(result.summary())
    assert result.passed, result.summary()


def test_the_benchmark_times_each_way_on_the_same_states(import_benchmark, capsys):
    found = import_benchmark("learner_autocast").main(
        ["--states", "3", "--answers", "2", "--mini-batch", "2", "--repeats", "2"]
    )
    assert len(found) == 4 and min(found.values()) > 0 and found["max_dlogp"] < 0.05
    assert "bf16 autocast, one micro-batch" in capsys.readouterr().out


def test_without_bf16_kernels_the_learner_runs_float32_and_the_run_says_so(
    import_benchmark, tiny_model, tmp_path, monkeypatch
):
    import types

    from unstable_core.cli.progress import precision_line

    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    learner = scorer(import_benchmark, tiny_model, tmp_path, autocast=True)
    assert learner.autocast is False and learner.packed_layers > 0  # float32, on packed kernels
    run = types.SimpleNamespace(cfg=types.SimpleNamespace(learner_autocast=True, device="cpu"))
    assert "no bfloat16 kernels" in precision_line(run, 10) and "float32" in precision_line(run, 10)
    assert precision_line(run, None) == ""  # `play` trains nothing
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    assert precision_line(run, 10) == "" and precision.uses_autocast(True, "cpu")
    assert not precision.uses_autocast(True, "cuda:0")  # a GPU learner's model is bf16 already
