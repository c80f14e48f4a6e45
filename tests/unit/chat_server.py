"""A real HTTP server on 127.0.0.1, in a thread of the test process, that answers like sglang.

The tests subclass :class:`JsonHandler` with the answers they want and run it under :func:`serving`. Only
loopback addresses are used; a test file imports the autouse fixture :func:`no_proxy` to keep its clients'
requests off any proxy. :data:`HELLO` and :func:`prime_with_logprobs` go with the recorded sglang answers.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sglang_captures import load

# The probe the capture healthy_chat_hello_enable_thinking_false answers (thinking switched off).
HELLO = {
    "name": "hello",
    "prompt": "Say hello.",
    "max_tokens": 64,
    "expect": "(?i)hello",
    "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
}
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy for any test of a file that imports this fixture, and none for loopback whatever is set."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


class JsonHandler(BaseHTTPRequestHandler):
    """Reads the request's JSON body (None when there is none) and hands it to :meth:`answer`; logs nothing.

    A client that gives up before the answer is written (a timeout test) closes the connection, no more.
    """

    def answer(self, method: str, headers: dict[str, str], body: Any) -> None:
        raise NotImplementedError

    def reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        try:
            self.answer(method, dict(self.headers.items()), body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up
            self.close_connection = True

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port while the block runs; yields the server's base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def free_port() -> int:
    """A loopback port nothing listens on (a server that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prime_with_logprobs() -> bytes:
    """The real prime answer, carrying the real 2+2 answer's (finite) logprobs, as a logprobs request gets."""
    body = json.loads(load("healthy_chat_prime_greedy").body)
    body["choices"][0]["logprobs"] = json.loads(load("healthy_chat_2plus2_logprobs").body)["choices"][0][
        "logprobs"
    ]
    return json.dumps(body).encode()
