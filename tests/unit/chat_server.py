"""A real HTTP server on 127.0.0.1, in a thread of the test process, that answers like sglang.

The tests subclass :class:`JsonHandler` with the answers they want and run it under :func:`serving`. Only
loopback addresses are used; a test file imports the autouse fixture :func:`no_proxy` to keep its clients'
requests off any proxy. :data:`HELLO` and :func:`prime_with_logprobs` go with the recorded sglang answers.
:meth:`JsonHandler.trickle` is a server that never finishes its answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
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
# A trickle gives up after this many seconds, so that a client without a deadline fails a test instead of
# hanging it (a test with a deadline is done long before).
TRICKLE_LIMIT = 30.0
# Heads for JsonHandler.trickle: a 200 whose promised body comes a byte at a time (8 bytes at once), and a
# status line whose headers never end.
TRICKLE_BODY = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"id": "'
TRICKLE_HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: "


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

    def trickle(self, head: bytes, interval: float = 0.1) -> None:
        """Send ``head`` at once, then one more byte every ``interval`` seconds, never finishing the answer.

        ``head`` is raw HTTP: a status line and headers promising a long body, and the body's start (a server
        that trickles its body), or only part of the headers (one that never finishes them). The trickle
        stops when the client goes away, when the server stops, or after ``TRICKLE_LIMIT`` seconds.
        """
        stopping: threading.Event = self.server.stopping  # type: ignore[attr-defined]
        self.close_connection = True
        given_up = time.monotonic() + TRICKLE_LIMIT
        try:
            self.wfile.write(head)
            self.wfile.flush()
            while not stopping.wait(interval) and time.monotonic() < given_up:
                self.wfile.write(b" ")
                self.wfile.flush()
        except OSError:  # the client hung up: its deadline worked
            pass

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
    httpd.stopping = threading.Event()  # type: ignore[attr-defined]  # ends the trickles
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.stopping.set()  # type: ignore[attr-defined]
        httpd.shutdown()
        httpd.server_close()


def free_port() -> int:
    """A loopback port nothing listens on (a server that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prime_with_logprobs() -> bytes:
    """The real prime answer, carrying finite logprobs as a logprobs request gets: the real 2+2 answer's
    entries, repeated to one per generated token (the answer's usage.completion_tokens, as sglang sends)."""
    body = json.loads(load("healthy_chat_prime_greedy").body)
    real = json.loads(load("healthy_chat_2plus2_logprobs").body)["choices"][0]["logprobs"]["content"]
    tokens = body["usage"]["completion_tokens"]
    body["choices"][0]["logprobs"] = {"content": [real[number % len(real)] for number in range(tokens)]}
    return json.dumps(body).encode()
