"""A fake OpenAI-compatible server for tests: the HTTP boundary we cannot reach here (OpenRouter, OpenAI).

It is a real HTTP server on 127.0.0.1 (`http.server`, one thread per request) serving POST
/v1/chat/completions and GET /v1/models. By default it plays a legal move: the first one listed on the
observation's "Available Moves" line, boxed. A test can script answers (`fail`), delay them (`delay_s`),
demand a key (`key`), and read what was sent (`requests`) and the most requests it served at once
(`max_in_flight`). With `fastapi=True` an unknown route answers as FastAPI servers (vLLM's) do:
404 `{"detail": "Not Found"}`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

MOVE = re.compile(r"'(\[[^\]]*\])'")


@attrs.define
class Scripted:
    """One scripted answer: an HTTP status with headers and a JSON body, after `delay_s` seconds."""

    status: int = 200
    headers: dict[str, str] = attrs.field(factory=dict)
    body: Any = None
    delay_s: float = 0.0


def legal_move_reply(messages: list[dict[str, Any]]) -> str:
    """A boxed move: the first of the observation's 'Available Moves', else [0]."""
    text = messages[-1]["content"] if messages else ""
    for line in reversed(str(text).splitlines()):
        if "Available Moves" in line:
            moves = MOVE.findall(line)
            if moves:
                return f"I play \\boxed{{{moves[0]}}}"
    return "\\boxed{[0]}"


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 (a fake of the boundary); use as a context manager."""

    def __init__(
        self, models: tuple[str, ...] = ("some-model",), key: str | None = None, fastapi: bool = False
    ) -> None:
        self.models = list(models)
        self.key = key
        self.fastapi = fastapi
        self.delay_s = 0.0
        self.script: list[Scripted] = []  # answers given before the default ones, in order
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def fail(self, *answers: Scripted) -> None:
        """Give these answers to the next requests, then the default ones."""
        self.script.extend(answers)

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- what the handler calls
    def answer(self, method: str, path: str, headers: dict[str, str], body: Any) -> Scripted:
        with self._lock:
            self.requests.append({"method": method, "path": path, "headers": headers, "body": body})
            scripted = self.script.pop(0) if self.script else None
        if scripted is not None:
            return scripted
        if self.key is not None and headers.get("Authorization") != f"Bearer {self.key}":
            return Scripted(
                401, body={"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}
            )
        if method == "GET" and path == "/v1/models":
            return Scripted(
                body={"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
            )
        if method != "POST" or path != "/v1/chat/completions":
            if self.fastapi:
                return Scripted(404, body={"detail": "Not Found"})
            return Scripted(404, body={"error": {"message": f"no route {method} {path}"}})
        model = body.get("model") if isinstance(body, dict) else None
        if model not in self.models:
            return Scripted(
                404,
                body={"error": {"message": f"The model `{model}` does not exist", "code": "model_not_found"}},
            )
        text = legal_move_reply(body.get("messages", []))
        return Scripted(
            body={
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17},
            },
            delay_s=self.delay_s,
        )

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _serve(self, method: str) -> None:
            server.enter()
            left = False
            try:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                answer = server.answer(method, self.path, dict(self.headers), body)
                time.sleep(answer.delay_s)
                data = json.dumps(answer.body if answer.body is not None else {}).encode()
                # the request leaves before its answer is sent: once the client has the answer it may send
                # the next request, which must not find this one still counted in flight
                server.leave()
                left = True
                self.send_response(answer.status)
                for key, value in {"Content-Type": "application/json", **answer.headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                pass
            finally:
                if not left:
                    server.leave()

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler
