"""The inference Ray actor: a real Ray runtime, the transformers backend on the tiny model, a restart."""

import time

import pytest
import ray

from unstable_core.errors import UnstableError
from unstable_core.inference.base import GenerationRequest, SamplingParams
from unstable_core.runtime.actors.inference import create_inference_actor
from unstable_core.testing import local_ray


@pytest.fixture(scope="module")
def ray_runtime():
    with local_ray(num_cpus=2):
        yield


RESTARTING = (
    ray.exceptions.RayActorError,
    ray.exceptions.ActorUnavailableError,
    ray.exceptions.GetTimeoutError,
)


def wait_until(check, timeout_s=120.0):
    """Poll `check()` until it is true, tolerating the errors of an actor that is (re)starting."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except RESTARTING:
            pass
        time.sleep(0.5)
    raise AssertionError("the actor did not come back in time")


def test_actor_generates_batches_and_survives_a_kill(ray_runtime, tiny_model):
    actor = create_inference_actor(
        "transformers", {"model": tiny_model, "gather_ms": 200.0}, name="inference-test"
    )
    wait_until(lambda: ray.get(actor.ping.remote(), timeout=30) == "pong")
    assert ray.get(actor.tokenizer_name.remote()) == tiny_model
    params = SamplingParams(temperature=0.0, max_tokens=4)
    refs = [actor.generate.remote(GenerationRequest((28, 29, 30 + i), params=params)) for i in range(6)]
    outs = ray.get(refs, timeout=120)
    assert all(o.finish_reason == "length" and len(o.token_ids) == 4 for o in outs)
    stats = ray.get(actor.stats.remote())
    assert stats["requests"] == 6 and stats["batches"] < 6  # concurrent calls were coalesced
    ray.kill(actor, no_restart=False)
    # the restarted actor has a fresh backend: its request count starts again from 0
    wait_until(lambda: ray.get(actor.stats.remote(), timeout=30)["requests"] == 0)
    assert ray.get(actor.ping.remote()) == "pong"
    again = ray.get(actor.generate.remote(GenerationRequest((28, 29, 30), params=params)), timeout=120)
    assert again.token_ids == outs[0].token_ids
    # many requests in one call: each its own output, a bad one its own error, the others unaffected
    many = ray.get(
        actor.generate_many.remote(
            [GenerationRequest((28, 29, 30), params=params), GenerationRequest((10**9,))]
        ),
        timeout=120,
    )
    assert many[0].token_ids == outs[0].token_ids
    assert many[1].finish_reason == "error" and "token ids must be in" in many[1].error


def test_unknown_backend_fails_in_the_caller(ray_runtime, tiny_model):
    with pytest.raises(UnstableError, match="unknown backend 'nope'"):
        create_inference_actor("nope", {"model": tiny_model})
    with pytest.raises(UnstableError, match="'model'"):
        create_inference_actor("transformers", {})
