"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 (`FakeOpenAIServer`, a fake of the
chat-completions boundary): completions, retries on 429/5xx/timeouts, one-line errors, the concurrency limit."""

import asyncio
import os
import subprocess
import sys
import time

import pytest
import tomllib

from unstable_core.errors import UnstableError
from unstable_core.games.templates import render_prompt
from unstable_core.inference.base import GenerationRequest, SamplingParams
from unstable_core.inference.chat_prompt import MessagesTokenizer, prompt_messages, tokenizer_for
from unstable_core.inference.openai_api import ApiError, OpenAIBackend, check_api_model, retry_after_s
from unstable_core.io import read_jsonl
from unstable_core.runtime.recovery.resume import is_learner_record
from unstable_core.testing.openai_server import FakeOpenAIServer, Scripted

OBS = "Current Board: ...\nAvailable Moves: '[2]', '[5]'"
KEY_ENV = "UNSTABLE_TEST_API_KEY"
SECRET = "sk-test-secret-0123456789"


@pytest.fixture
def server():
    with FakeOpenAIServer(models=("some-model", "other")) as s:
        yield s


def request(template="default", temperature=0.5, max_tokens=32):
    _, ids = render_prompt(template, OBS, MessagesTokenizer())
    return GenerationRequest(ids, params=SamplingParams(temperature=temperature, max_tokens=max_tokens))


def generate(backend, requests):
    async def go():
        try:
            return await asyncio.gather(*(backend.generate(r) for r in requests))
        finally:
            await backend.close()

    return asyncio.run(go())


def backend_for(server, model="openai:some-model", **kw):
    kw = {"backoff_s": 0.01, "timeout_s": 5.0, "max_retries": 2, "api_key_env": KEY_ENV, **kw}
    return OpenAIBackend(model, base_url=server.base_url, **kw)


def test_a_completion_sends_the_templates_chat_messages_and_the_key(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    [out] = generate(backend_for(server), [request()])
    assert (out.text, out.finish_reason, out.token_ids, out.logprobs, out.completion_tokens) == (
        "I play \\boxed{[2]}",
        "stop",
        [],
        [],
        7,  # the server's usage: an API gives no token ids, only its count
    )
    [sent] = server.chat_requests()
    body = sent["body"]
    assert body["model"] == "some-model" and body["temperature"] == 0.5 and body["max_tokens"] == 32
    assert "top_p" not in body and "seed" not in body  # defaults are the server's
    # the default template's one user message, as messages (not a string rendered for another model)
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert (
        body["messages"][0]["content"].startswith("You are playing a game.")
        and OBS in body["messages"][0]["content"]
    )
    assert sent["headers"]["Authorization"] == f"Bearer {SECRET}"


def test_a_fixed_string_template_is_sent_verbatim_as_one_user_message():
    text, ids = render_prompt("qwen3-zs", OBS, MessagesTokenizer())
    assert MessagesTokenizer().decode(ids) == text
    assert prompt_messages(text) == [{"role": "user", "content": text}]
    assert tokenizer_for("openai:x").__class__ is MessagesTokenizer


def test_429_is_retried_after_the_servers_retry_after(server):
    server.fail(Scripted(429, headers={"Retry-After": "1"}, body={"error": {"message": "rate limited"}}))
    backend = backend_for(server)
    start = time.monotonic()
    [out] = generate(backend, [request()])
    assert out.finish_reason == "stop" and out.text.endswith("\\boxed{[2]}")
    assert time.monotonic() - start >= 1.0  # Retry-After: 1, not the 0.01 s backoff
    assert len(server.chat_requests()) == 2 and backend.client.retries == 1


def test_5xx_retries_exhausted_give_a_clear_error(server):
    server.fail(*[Scripted(503, body={"error": {"message": "overloaded"}})] * 3)
    [out] = generate(backend_for(server, max_retries=2), [request()])
    assert out.finish_reason == "error" and len(server.chat_requests()) == 3
    assert "HTTP 503 (overloaded) after 3 attempts" in out.error and "\n" not in out.error


def test_a_timeout_is_retried_then_a_clear_error(server):
    server.delay_s = 1.5
    start = time.monotonic()
    [out] = generate(backend_for(server, timeout_s=0.3, max_retries=1), [request()])
    assert out.finish_reason == "error" and len(server.chat_requests()) == 2
    assert "no answer within 0.3 s after 2 attempts" in out.error and "--api-timeout-s" in out.error
    assert time.monotonic() - start < 1.5  # the client gave up at its timeout, twice


def test_a_refused_key_names_the_variable_not_the_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeOpenAIServer(key="the-right-key") as server:
        [out] = generate(backend_for(server), [request()])
        assert len(server.chat_requests()) == 1  # a bad key is not retried
    assert out.finish_reason == "error" and "\n" not in out.error
    assert f"refused the API key in ${KEY_ENV} (HTTP 401" in out.error and SECRET not in out.error


def test_a_missing_key_says_to_export_it(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with FakeOpenAIServer(key="the-right-key") as server:
        [out] = generate(backend_for(server), [request()])
        assert "Authorization" not in server.chat_requests()[0]["headers"]
    assert f"${KEY_ENV} is not set: export {KEY_ENV}=<your key>" in out.error


def test_an_unknown_model_names_the_model_and_the_server(server):
    [out] = generate(backend_for(server, model="openai:nope"), [request()])
    assert out.finish_reason == "error" and len(server.chat_requests()) == 1
    assert (
        f"model 'nope' not found at {server.base_url} (HTTP 404: The model `nope` does not exist)"
        in out.error
    )


def test_the_concurrency_limit_holds(server):
    server.delay_s = 0.3
    backend = backend_for(server, concurrency=3)
    outs = generate(backend, [request() for _ in range(10)])
    assert all(o.finish_reason == "stop" for o in outs) and len(server.chat_requests()) == 10
    assert server.max_in_flight == 3
    assert backend.stats()["api_completion_tokens"] == 70  # the fake's usage: 7 per completion


def test_an_adapter_request_fails_without_calling_the_server(server):
    _, ids = render_prompt("default", OBS, MessagesTokenizer())
    [out] = generate(backend_for(server), [GenerationRequest(ids, lora_path="/some/adapter")])
    assert out.finish_reason == "error" and "cannot load the LoRA adapter" in out.error
    assert server.chat_requests() == []


def test_the_preflight_check_lists_what_is_served(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    check_api_model("openai:some-model", server.base_url, api_key_env=KEY_ENV)
    with pytest.raises(ApiError, match=r"model 'nope' is not served at .* \(it serves some-model, other\)"):
        check_api_model("openai:nope", server.base_url, api_key_env=KEY_ENV)


def test_fastapi_error_bodies_are_shown_as_their_text():
    """vLLM's server (FastAPI) answers {"detail": "..."} or a list of validation errors; before, the error
    showed the JSON itself."""
    detail = [{"loc": ["body", "max_tokens"], "msg": "Input should be > 0"}]
    for refusal, text in [
        (Scripted(400, body={"detail": "max_tokens is too large"}), "HTTP 400: max_tokens is too large"),
        (Scripted(422, body={"detail": detail}), "HTTP 422: body.max_tokens: Input should be > 0"),
    ]:
        with FakeOpenAIServer(fastapi=True) as server:
            server.fail(refusal)
            [out] = generate(backend_for(server), [request()])
        assert out.finish_reason == "error" and out.error.endswith(text) and "detail" not in out.error


def test_a_base_url_without_v1_gets_the_hint_to_add_it():
    """A server serving the API under /v1 (vLLM's, FastAPI: 404 {"detail": "Not Found"} elsewhere): before,
    /models answering 404 passed as 'no such route' and every request failed later with a 404."""
    with FakeOpenAIServer(fastapi=True) as server:
        root = server.base_url.removesuffix("/v1")
        with pytest.raises(
            ApiError, match=rf"{root}/models answered HTTP 404, .* give --base-url {root}/v1$"
        ):
            check_api_model("openai:some-model", root)
        check_api_model("openai:some-model", server.base_url)  # with /v1: fine
        backend = OpenAIBackend("openai:some-model", base_url=root, backoff_s=0.01, max_retries=0)
        [out] = generate(backend, [request()])
    assert out.error.endswith(f"try --base-url {root}/v1")


def test_an_unreachable_server_is_a_clear_error():
    with FakeOpenAIServer() as server:
        url = server.base_url  # the port is free again once the server is closed
    with pytest.raises(
        ApiError, match=r"cannot connect: .* after 2 attempts; start the server, fix --base-url"
    ):
        check_api_model("openai:x", url, max_retries=1, backoff_s=0.01)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://host/v1",
        "127.0.0.1:8080/v1",
        "http://user:pw@host/v1",
        "http://host/v1?key=pw",
        "http://h/v1#pw",
    ],
    ids=["scheme", "no-scheme", "credentials", "query", "fragment"],
)
def test_bad_base_urls_are_refused(url):
    with pytest.raises(UnstableError, match="base_url must") as info:
        OpenAIBackend("openai:x", base_url=url)
    assert "pw" not in str(info.value)


def test_a_redirect_to_another_host_never_carries_the_key(server, monkeypatch):
    """GET /models answered by a redirect: followed within the server with the key, to another origin
    (another port of 127.0.0.1 here) without it."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeOpenAIServer(models=("elsewhere",)) as other:
        server.fail(Scripted(302, headers={"Location": f"{other.base_url}/models"}))
        check_api_model("openai:elsewhere", server.base_url, api_key_env=KEY_ENV)  # other's list
        [(sent)] = other.requests
        assert "Authorization" not in sent["headers"] and sent["path"] == "/v1/models"
    server.fail(Scripted(302, headers={"Location": f"{server.base_url}/models"}))
    check_api_model("openai:some-model", server.base_url, api_key_env=KEY_ENV)
    first, second = server.requests[-2:]
    assert first["headers"]["Authorization"] == second["headers"]["Authorization"] == f"Bearer {SECRET}"


def test_retry_after_reads_seconds_and_dates():
    assert retry_after_s("2.5") == 2.5 and retry_after_s(None) is None and retry_after_s("soon") is None
    assert 0 <= retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: at once


# ---- the API model in games and runs: an opponent, never training data


def test_an_api_seat_plays_with_a_local_model_and_only_the_local_seat_is_training_data(server, tiny_model):
    from unstable_core.games.loop import play_game
    from unstable_core.inference.hf.backend import TransformersBackend
    from unstable_core.runtime.actors.buffer import StepBuffer
    from unstable_core.types import GameSpec, PlayerSpec

    async def go(collect):
        local = TransformersBackend(tiny_model, device="cpu")
        api = backend_for(server)
        spec = GameSpec(
            game_idx=0,
            env_id="TicTacToe-v0-train",
            seed=3,
            # the API seat moves first (seat 0), so it plays whatever the random tiny model does
            players=[PlayerSpec(0, "openai:some-model", collect), PlayerSpec(1, "ckpt-0", collect_data=True)],
        )
        try:
            return await play_game(
                spec,
                {0: api.generate, 1: local.generate},
                {0: api.tokenizer, 1: local.tokenizer},
                lora_paths={0: None, 1: None},
                policy_versions={0: -1, 1: 0},
                params=SamplingParams(temperature=1.0, max_tokens=8),
                error_allowance=None,  # the random tiny model gets its retries: the API seat gets turns
            )
        finally:
            await asyncio.gather(local.close(), api.close())

    result = asyncio.run(go(False))
    assert not result.info.failed, result.info.error
    api_steps = [s for t in result.trajectories if t.pid == 0 for s in t.steps]
    assert api_steps and all(s.completion_ids == [] and s.act.startswith("I play") for s in api_steps)
    buffer = StepBuffer(100)
    buffer.add_result(result)
    served = buffer.get_batch(buffer.size())
    assert served and {s.pid for s in served} == {1} and all(s.completion_ids for s in served)

    trained = asyncio.run(go(True))  # an API model at a trained seat: the game fails, saying why
    assert trained.info.failed and "a text-only (API) model can be an opponent, never a trained seat" in (
        trained.info.error
    )


def test_unstable_run_against_an_api_opponent(tiny_model, tmp_path):
    """`unstable run --fixed-opponent openai:some-model --base-url ...` end to end: games against the API
    complete, its seats never reach the learner, the key stays out of the run directory, and (stdout is a
    pipe here) plain progress lines show the run's life."""
    with FakeOpenAIServer(key=SECRET) as server:
        cmd = [
            sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(tmp_path),
            "--run-name", "api", "--fixed-opponent", "openai:some-model", "--base-url", server.base_url,
            "--sampler", "fixed", "--api-key-env", KEY_ENV, "--learning-steps", "1", "--batch-size", "4",
            "--mini-batch-size", "2", "--max-generation-len", "8", "--num-train-workers", "4",
            "--num-eval-workers", "1", "--device", "cpu", "--lora-config", '{"lora_rank": 4, "lora_alpha": 8}',
            "--progress-every-s", "1",
        ]  # fmt: skip
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", KEY_ENV: SECRET}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=env)
        chat_calls = len(server.chat_requests())
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    run_dir = tmp_path / "api"

    games = [g for g in read_jsonl(run_dir / "games" / "games.jsonl") if not g["info"]["failed"]]
    api_turns = 0
    for g in games:
        assert sorted(g["info"]["models"].values())[1] == "openai:some-model"
        for t in g["trajectories"]:
            if t["model_uid"] == "openai:some-model":
                assert not t["collect_data"] and all(s["completion_ids"] == [] for s in t["steps"])
                api_turns += len(t["steps"])
            else:
                assert t["collect_data"] and all(s["completion_ids"] for s in t["steps"])
    assert api_turns >= 1 and chat_calls >= api_turns  # every API turn was a request to the server
    assert any(g["info"]["eval"] for g in games) or chat_calls > 0
    [metrics] = [r for r in read_jsonl(run_dir / "metrics.jsonl") if is_learner_record(r)]
    assert metrics["step"] == 1 and metrics["learner/batch_steps"] >= 4

    cfg = tomllib.loads((run_dir / "config.toml").read_text())
    assert (cfg["base_url"], cfg["api_key_env"]) == (server.base_url, KEY_ENV)
    for path in run_dir.rglob("*"):  # the key is nowhere in the run directory
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[") and "| games train" in line]
    assert lines and "step 0/1" in lines[0]

    # `unstable export --model openai:some-model`: the API's turns as the chat messages it was sent
    from unstable_core.report.export import ExportFilter, export_records

    records = list(export_records(games, ExportFilter(models=("openai:some-model",))))
    assert len(records) == api_turns
    for r in records:
        user, answer = r["messages"]
        assert user["role"] == "user" and user["content"].startswith("You are playing a game.")
        assert answer["role"] == "assistant" and answer["content"].startswith("I play \\boxed{[")


# ---- configuration


def test_the_base_url_comes_from_the_environment_when_not_given(monkeypatch):
    from unstable_core.config import RunConfig

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert RunConfig(fixed_opponents=["openai:m"], sampler="fixed").base_url == "http://127.0.0.1:9/v1"
    assert RunConfig(fixed_opponents=["openai:m"], base_url="https://openrouter.ai/api/v1").base_url == (
        "https://openrouter.ai/api/v1"
    )
    assert RunConfig().base_url is None  # no API model: nothing to resolve


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"api_key_env": SECRET + "!"}, "api_key_env takes the NAME of an environment variable"),
        ({"model_name": "openai:m"}, "is an API model: it cannot be trained"),
        (
            {"fixed_opponents": ["google/gemini-2.0-flash-lite-001"]},
            "use --fixed-opponent openai:google/gemini",
        ),
        ({"fixed_opponents": ["openai:m"], "base_url": "localhost:8080"}, "base_url must be an http://"),
    ],
    ids=["key-as-variable-name", "train-an-api-model", "reference-api-opponent", "url-without-scheme"],
)
def test_api_settings_errors_are_one_line(kwargs, expected):
    from unstable_core.config import RunConfig
    from unstable_core.runtime.launch.preflight import check_api_settings

    with pytest.raises(UnstableError) as info:
        check_api_settings(
            RunConfig(**kwargs).base_url
        )  # the URL: the OpenAI client's, before the run starts
    assert expected in str(info.value) and SECRET not in str(info.value) and "\n" not in str(info.value)


def test_plain_progress_prints_a_line_every_few_seconds(capsys):
    from unstable_core.cli.progress import _PlainProgress

    clock = iter([100.0, 101.0, 103.5, 104.0])
    show = _PlainProgress(learning_steps=3, every_s=2.5, clock=lambda: next(clock))
    snap = {
        "elapsed_s": 12,
        "learner_step": 1,
        "counts": {"train_games": 9, "train_failed": 1},
        "means": {"train/TicTacToe-v0-train/invalid_move_rate": 0.25},
        "inference": {"tokens_per_s": 41.0},
    }
    for _ in range(4):
        show(snap)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2  # at 100 s and 103.5 s
    assert lines[0] == (
        "[    12 s] | step 1/3 | games train 9 (1 failed) eval 0 | train invalid 0.25 | tokens/s 41.0"
    )


def test_plain_progress_shows_every_scheduled_evaluation(capsys):
    """An evaluation that arrives between two throttled lines, or after the last progress call, still gets
    its line: a log of the run has every checkpoint's result."""
    from unstable_core.cli.progress import _PlainProgress

    clock = iter([100.0, 100.5, 101.0, 101.5, 102.0])
    show = _PlainProgress(learning_steps=2, every_s=10.0, clock=lambda: next(clock))
    key = "eval/arithmetic-2/vs_none"
    result = {
        f"{key}/{x}": v for x, v in [("games", 3), ("wins", 1), ("draws", 0), ("losses", 2), ("failed", 0)]
    }
    result |= {f"{key}/win_rate": 1 / 3, f"{key}/win_rate_lo": 0.06, f"{key}/win_rate_hi": 0.79}
    snap = {"elapsed_s": 5, "learner_step": 1, "counts": {}, "means": {}}
    show(snap)
    show(snap)  # throttled: nothing new
    show({**snap, "evals": {1: result}})  # new: printed at once
    show.finish({**snap, "evals": {1: result}})  # already shown
    show.finish({**snap, "learner_step": 2, "evals": {1: result, 2: result}})  # arrived after the last call
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert "ckpt" not in lines[0] and "eval ckpt-1 arithmetic-2 accuracy 0.33" in lines[1]
    assert "eval ckpt-2 arithmetic-2 accuracy 0.33 [0.06, 0.79] correct/-/wrong 1/0/2" in lines[2]


@pytest.mark.parametrize(
    ("model", "key", "expected"),
    [
        ("openai:nope", SECRET, "openai:nope: model 'nope' is not served at {url} (it serves some-model)"),
        ("openai:some-model", "sk-wrong-key", f"refused the API key in ${KEY_ENV} (HTTP 401"),
    ],
    ids=["unknown-model", "refused-key"],
)
def test_unstable_run_checks_the_api_opponent_before_ray_starts(tiny_model, tmp_path, model, key, expected):
    with FakeOpenAIServer(key=SECRET) as server:
        cmd = [
            sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(tmp_path),
            "--sampler", "fixed", "--fixed-opponent", model, "--base-url", server.base_url, "--api-key-env", KEY_ENV,
        ]  # fmt: skip
        env = {**os.environ, KEY_ENV: key}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected.format(url=server.base_url) in lines[0], proc.stderr
    assert key not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing started, no run directory
