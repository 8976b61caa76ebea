"""The OpenAI-compatible backend: `openai:MODEL` served by any chat-completions server (OpenRouter, OpenAI,
a llama.cpp server, vLLM's server), as a fixed or evaluation opponent. Its turns are never training data:
an API gives neither token ids nor the log-probabilities the learner needs.

Standard library only: each request is a blocking `urllib` call in a pool of `concurrency` threads (the
concurrency limit), with a timeout, and retries with exponential backoff (or the server's Retry-After) on
429, 5xx, timeouts and connection errors. Errors are one line without the key: 401/403 name the
environment variable that holds it, 404 names the model and the server. The key is read from the
environment by the backend itself: it is never passed around, written or logged, nor sent on to another
host when a server redirects (the Authorization header is dropped on a redirect to another origin).
"""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import json
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from unstable_core.config.api import default_base_url
from unstable_core.errors import UnstableError
from unstable_core.inference.base import GenerationOutput, GenerationRequest, InferenceBackend
from unstable_core.inference.chat_prompt import MessagesTokenizer, prompt_messages
from unstable_core.model_loading import API_PREFIX

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
RETRY_STATUSES = frozenset({408, 409, 425, 429})  # and every 5xx
MAX_RETRY_AFTER_S = 120.0
USER_AGENT = "unstable (OpenAI-compatible backend)"


class ApiError(UnstableError):
    """A request to an OpenAI-compatible server failed for good; the message is one line, key-free.
    `status` is the last HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def api_model_name(spec: str) -> str:
    """`openai:MODEL` -> `MODEL` (a bare name is returned as is)."""
    name = spec[len(API_PREFIX) :] if spec.startswith(API_PREFIX) else spec
    if not name:
        raise UnstableError(
            f"{spec!r}: give the served model's name after {API_PREFIX!r}, e.g. openai:gpt-4o"
        )
    return name


def check_base_url(url: str) -> str | None:
    """Why `url` cannot be a base URL (None when it can); the problem never repeats a credential."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.query or parsed.fragment:  # not repeated: it may hold a key, and base_url lands in config.toml
        return (
            "base_url must not carry a query string or fragment (?... or #...): it is written to config.toml; "
            "give the server's path only and put a key in the API key variable"
        )
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"base_url must be an http:// or https:// URL such as http://127.0.0.1:8080/v1, got {url!r}"
    if parsed.username or parsed.password:
        return "base_url must not carry credentials (user:password@); put the key in the API key variable"
    return None


def retry_after_s(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`, the port made explicit."""
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class _KeepKeyAtHome(urllib.request.HTTPRedirectHandler):
    """Follows redirects as urllib does, but drops the Authorization header when the redirect leaves the
    origin (scheme, host, port) the key was meant for: urllib itself would send it anywhere."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201 (urllib's API)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_KeepKeyAtHome())


@attrs.frozen
class _Attempt:
    """What one HTTP attempt gave: a JSON body, or a status (0: no answer) with the server's message."""

    status: int
    body: Any = None
    message: str = ""
    retry_after: float | None = None


class OpenAIClient:
    """Blocking JSON calls to an OpenAI-compatible server with timeouts and retries (thread-safe)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key_env: str = DEFAULT_KEY_ENV,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.base_url = (base_url or default_base_url()).rstrip("/")
        problem = check_base_url(self.base_url)
        if problem:
            raise UnstableError(problem)
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise UnstableError(
                f"timeout_s must be > 0, max_retries and backoff_s >= 0; got {timeout_s}, {max_retries}, {backoff_s}"
            )
        self.api_key_env = api_key_env
        self.timeout_s, self.max_retries = float(timeout_s), int(max_retries)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.retries = 0  # attempts beyond the first, over all requests
        self._lock = threading.Lock()

    @property
    def _key(self) -> str:
        return os.environ.get(self.api_key_env, "")

    def _redact(self, text: str) -> str:
        key = self._key
        return text.replace(key, "***") if key else text

    def request(self, method: str, path: str, body: Any = None, model: str | None = None) -> Any:
        """The JSON answer of `method path`, retried on 429/5xx/timeouts/connection errors; ApiError else."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        for attempt in range(self.max_retries + 1):
            result = self._attempt(method, url, body)
            if result.status == 200:
                return result.body
            if not _retryable(result.status) or attempt == self.max_retries:
                raise ApiError(self._failure(result, url, model, attempt + 1), result.status)
            with self._lock:
                self.retries += 1
            time.sleep(self._delay(attempt, result.retry_after))
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER_S)
        return min(self.max_backoff_s, self.backoff_s * 2**attempt) * random.uniform(1.0, 1.25)

    def _attempt(self, method: str, url: str, body: Any) -> _Attempt:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with _OPENER.open(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw_error = exc.read() if exc.fp is not None else b""
            return _Attempt(
                exc.code,
                message=self._redact(_server_message(raw_error, exc.reason)),
                retry_after=retry_after_s(exc.headers.get("Retry-After") if exc.headers else None),
            )
        except TimeoutError:
            return _Attempt(0, message=f"no answer within {self.timeout_s:g} s")
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                return _Attempt(0, message=f"no answer within {self.timeout_s:g} s")
            return _Attempt(0, message=self._redact(f"cannot connect: {reason}"))
        except (http.client.HTTPException, ConnectionError, OSError) as exc:
            return _Attempt(0, message=self._redact(f"connection broken: {type(exc).__name__}: {exc}"))
        try:
            return _Attempt(200, body=json.loads(raw))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _Attempt(502, message=f"the answer is not JSON: {raw[:120]!r}")

    def _failure(self, result: _Attempt, url: str, model: str | None, attempts: int) -> str:
        """The one-line error of a request that failed for good."""
        status, detail = result.status, result.message
        if status in (401, 403):
            if not self._key:
                return (
                    f"{self.base_url} answered HTTP {status} ({detail}) and ${self.api_key_env} is not set: "
                    f"export {self.api_key_env}=<your key> (or name another variable with --api-key-env)"
                )
            return (
                f"{self.base_url} refused the API key in ${self.api_key_env} (HTTP {status}: {detail}); "
                f"set {self.api_key_env} to a valid key for this server"
            )
        if status == 404:
            what = f"model {model!r}" if model else url
            return (
                f"{what} not found at {self.base_url} (HTTP 404: {detail}); check the model name "
                f"(GET {self.base_url}/models lists the served ones) and --base-url"
            ) + _without_v1_hint(self.base_url)
        tries = f"after {attempts} attempt{'s' if attempts > 1 else ''}"
        if status == 0:
            return f"{url}: {detail} {tries}; start the server, fix --base-url or raise --api-timeout-s"
        if _retryable(status):
            return (
                f"{url}: HTTP {status} ({detail}) {tries}; the server is busy or failing: retry later, "
                "lower --api-concurrency or raise --api-max-retries"
            )
        return f"{url}: HTTP {status}: {detail}"

    # ---- the routes
    def chat(self, model: str, messages: list[dict[str, str]], **params: Any) -> dict[str, Any]:
        """POST /chat/completions; the answer's JSON."""
        body = {"model": model, "messages": messages, **{k: v for k, v in params.items() if v is not None}}
        answer = self.request("POST", "chat/completions", body, model=model)
        if not isinstance(answer, dict) or not answer.get("choices"):
            raise ApiError(f"{self.base_url}/chat/completions answered without choices: {str(answer)[:200]}")
        return answer

    def list_models(self) -> list[str] | None:
        """The ids GET /models lists; None when the server has no such route (404)."""
        try:
            answer = self.request("GET", "models")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            return None
        return [str(m.get("id")) for m in data if isinstance(m, dict)]


def _usage_tokens(answer: dict[str, Any]) -> int | None:
    """The completion tokens the server reports in `usage`; None when it reports none (or nonsense)."""
    usage = answer.get("usage")
    value = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return int(value)


def _retryable(status: int) -> bool:
    return status == 0 or status in RETRY_STATUSES or status >= 500


def _server_message(raw: bytes, reason: Any) -> str:
    """The error message of an HTTP error body, short: OpenAI's {"error": {"message": ...}}, FastAPI's
    {"detail": "..."} (vLLM's server) or its validation errors {"detail": [{"loc": [...], "msg": ...}]}."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data))
        msg = (err.get("message") or err.get("msg")) if isinstance(err, dict) else err
        if isinstance(msg, list):
            msg = "; ".join(_detail_item(item) for item in msg)
        if msg:
            text = str(msg)
    text = " ".join((text or str(reason or "")).split())
    return text[:200] or "no detail"


def _detail_item(item: Any) -> str:
    """One of FastAPI's validation errors: `body.max_tokens: Input should be greater than 0`."""
    if not isinstance(item, dict) or "msg" not in item:
        return str(item)
    where = ".".join(str(part) for part in item.get("loc") or ())
    return f"{where}: {item['msg']}" if where else str(item["msg"])


def _without_v1_hint(base_url: str) -> str:
    """The hint for a server that answers 404 at a base URL not ending in /v1 (where they serve the API)."""
    if urllib.parse.urlsplit(base_url).path.rstrip("/").endswith("/v1"):
        return ""
    return f"; OpenAI-compatible servers serve the API under /v1: try --base-url {base_url}/v1"


def check_api_model(
    spec: str, base_url: str | None, api_key_env: str = DEFAULT_KEY_ENV, **client_kw: Any
) -> None:
    """Before a run starts: the server answers, takes the key, and serves the model (when it lists models);
    raises ApiError with one line naming what to fix."""
    client = OpenAIClient(base_url, api_key_env=api_key_env, **client_kw)
    model = api_model_name(spec)
    served = client.list_models()
    if served is None and _without_v1_hint(client.base_url):  # no /models here: is the API under /v1?
        under_v1 = OpenAIClient(f"{client.base_url}/v1", api_key_env=api_key_env, **client_kw)
        try:
            answers = under_v1.list_models() is not None
        except ApiError:
            answers = False
        if answers:
            raise ApiError(
                f"{client.base_url}/models answered HTTP 404, {under_v1.base_url}/models answers: the server "
                f"serves the API under /v1: give --base-url {under_v1.base_url}",
                404,
            )
    if served is not None and served and model not in served:
        shown = ", ".join(served[:8]) + (f" and {len(served) - 8} more" if len(served) > 8 else "")
        raise ApiError(
            f"model {model!r} is not served at {client.base_url} (it serves {shown}); fix the name after "
            f"{API_PREFIX!r} or --base-url"
        )


class OpenAIBackend(InferenceBackend):
    """`openai:MODEL` through an OpenAI-compatible chat-completions server; text only (no token ids)."""

    overlap_batches = True  # requests are independent HTTP calls: never wait for a previous batch

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = DEFAULT_KEY_ENV,
        concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        max_tokens: int | None = None,
        max_batch_size: int = 64,
        gather_ms: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, max_batch_size=max_batch_size, gather_ms=gather_ms, **kwargs)
        if int(concurrency) < 1:
            raise UnstableError(f"concurrency must be >= 1, got {concurrency}")
        if max_tokens is not None and int(max_tokens) < 1:
            raise UnstableError(f"max_tokens must be >= 1 or None, got {max_tokens}")
        self.api_model = api_model_name(model)
        self.client = OpenAIClient(
            base_url,
            api_key_env=api_key_env,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
        )
        self.concurrency = int(concurrency)
        self.max_tokens = max_tokens
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="openai-api")
        self._tokenizer = MessagesTokenizer(model)
        self.completion_tokens = 0
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> MessagesTokenizer:
        return self._tokenizer

    def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Complete `requests` (blocking), at most `concurrency` at a time."""
        return list(self._pool.map(self._complete, requests))

    async def _run_batch(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        loop = asyncio.get_running_loop()
        return list(
            await asyncio.gather(*(loop.run_in_executor(self._pool, self._complete, r) for r in requests))
        )

    def _complete(self, request: GenerationRequest) -> GenerationOutput:
        """One chat completion; a failure becomes an error output with the client's one-line message."""
        if request.lora_path is not None:
            return GenerationOutput.failure(
                f"{self.model_name} is an API model: it cannot load the LoRA adapter {request.lora_path}"
            )
        p = request.params
        messages = prompt_messages(self._tokenizer.decode(request.prompt_ids))
        try:
            answer = self.client.chat(
                self.api_model,
                messages,
                temperature=p.temperature,
                top_p=p.top_p if p.top_p < 1.0 else None,
                max_tokens=self.max_tokens or p.max_tokens,
                seed=p.seed,
            )
        except ApiError as exc:
            return GenerationOutput.failure(f"{self.model_name}: {exc}")
        choice = answer["choices"][0]
        text = (choice.get("message") or {}).get("content") or ""
        counted = _usage_tokens(answer)
        with self._lock:
            self.completion_tokens += counted or 0
        reason = "length" if choice.get("finish_reason") == "length" else "stop"
        return GenerationOutput(
            text=str(text), token_ids=[], logprobs=[], finish_reason=reason, completion_tokens=counted
        )

    def stats(self) -> dict[str, float]:
        """The base figures plus the API's: retries and completion tokens reported by the server."""
        return {
            **super().stats(),
            "api_retries": float(self.client.retries),
            "api_completion_tokens": float(self.completion_tokens),
        }

    def _release(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
