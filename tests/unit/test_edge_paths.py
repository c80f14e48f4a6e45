"""The router's edge refuses a request path that holds a dot-segment or an encoded slash (400), as the client
sent it ($request_uri), before any location: nginx picks the location by the path it resolved, while
proxy_pass without a URI sends smg the raw one (roles/sglang_router/templates/sglang-edge.conf.j2).

The regex is taken from the rendered configuration (the role's template, rendered with Jinja2 as Ansible does)
and run with Python's re on a table of raw request URIs; nginx uses PCRE, and the regex keeps to what both
read alike. Where nginx is installed, the rendered configuration passes `nginx -t`, and a real nginx in front
of a stand-in smg answers the same table: 400 for each refused URI (smg never sees it), the raw URI passed on
for each allowed one."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "sglang_router"
TEMPLATE = ROLE / "templates" / "sglang-edge.conf.j2"
ROLE_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
CLIENT_KEY = "test-client-key-0123456789"
NODES_KEY = "test-nodes-key-0123456789"

# Raw request URIs (the request line's target, as a client may send it) the edge passes on to smg unchanged.
ALLOWED = [
    "/v1/chat/completions",
    "/v1/models",
    "/health",
    "/generate",
    "/workers",
    "/workers/0b5c2f6e-2e2e",  # hex that is no escape: 5c, 2f, 2e
    "/v1/models?x=a.b",
    "/v1/chat/completions?",
    "/v1/models/glm-5.1",
    "/v1/models/.hidden",  # a segment that begins with a dot is no dot-segment
    "/v1/models/..hidden",
    "/v1/files/a..b",
    "/v1/...",  # three dots: a name, not a dot-segment (RFC 3986, 5.2.4)
    "/v1/models/%41%62c",  # other escapes
    "/v1/models?next=/../workers&path=a%2Fb%5Cc&dots=%2e%2e",  # the query is not a path
]
# Raw request URIs the edge refuses with 400: dot-segments, plain or percent-encoded in any case, and encoded
# slashes and backslashes.
REFUSED = [
    "/v1/../workers",
    "/v1/%2e%2e/workers",
    "/v1/%2E%2E/workers",
    "/v1/%2e%2E/workers",
    "/v1/%2E./workers",
    "/v1/.%2e/workers",
    "/v1/./models",
    "/v1/%2e/models",
    "/v1/%2E/models",
    "/./v1/models",
    "/../workers",
    "/workers/../v1/chat/completions",
    "/v1/..",
    "/v1/.",
    "/v1/%2e%2e",
    "/v1/..?x=1",
    "/v1/%2e?x=a.b",
    "/v1%2fworkers",
    "/v1%2Fworkers",
    "/v1%5cworkers",
    "/v1%5Cworkers",
    "/v1\\workers",
    "/v1/models/..%2f..%2fworkers",
    "/get_server_info%2f..%2f..%2fv1/models",
]
GUARD_RE = re.compile(r'^ *if \(\$request_uri ~ "((?:[^"\\]|\\.)*)"\) \{\n *return 400 ', re.MULTILINE)


def render(**overrides: Any) -> str:
    """The edge's configuration as the role renders it (Ansible's Jinja2 settings: trim_blocks), with the
    role's own variables where the template reads them and test values for the inventory's."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    context = {
        "ansible_managed": "Ansible managed",
        "__sglang_router_upstream_url": "http://127.0.0.1:30001",
        "__sglang_router_edge_admin_paths": ROLE_VARS["__sglang_router_edge_admin_paths"],
        "__sglang_router_edge_client_keys": [CLIENT_KEY],
        "__sglang_router_tls": False,
        "__sglang_router_tls_dir": ROLE_VARS["__sglang_router_tls_dir"],
        "sglang_router_host": "0.0.0.0",
        "sglang_router_port": 30000,
        "sglang_router_upstream_port": 30001,
        "sglang_router_worker_api_key": NODES_KEY,
    }
    return env.from_string(TEMPLATE.read_text()).render(context | overrides)


def nginx_string(quoted: str) -> str:
    """The value of a quoted nginx string (ngx_conf_read_token): a backslash before a quote or a backslash
    gives that character, before t, r or n a tab, CR or LF; any other backslash stays."""
    return re.sub(r"\\([\"'\\trn])", lambda m: {"t": "\t", "r": "\r", "n": "\n"}.get(m[1], m[1]), quoted)


def guard_regex(conf: str) -> re.Pattern[str]:
    """The edge's path regex as nginx reads it from the rendered file: there once, at the server's level,
    before the first location."""
    (found,) = GUARD_RE.finditer(conf)
    assert found.start() < conf.index("        location "), "the path check must come before the locations"
    return re.compile(nginx_string(found.group(1)))


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_the_path_check_is_rendered_once_before_the_locations(tls: bool) -> None:
    conf = render(__sglang_router_tls=tls)
    regex = guard_regex(conf)
    assert regex.pattern.isascii() and regex.pattern.startswith("^[^?]*")
    # nginx's own flags: `~` is case-sensitive, so the pattern spells both cases of each escape itself.
    assert 'if ($request_uri ~ "' in conf and 'if ($request_uri ~* "' not in conf


@pytest.mark.parametrize("uri", REFUSED)
def test_a_dot_segment_or_an_encoded_slash_is_refused(uri: str) -> None:
    assert guard_regex(render()).search(uri), uri


@pytest.mark.parametrize("uri", ALLOWED)
def test_a_normal_path_passes(uri: str) -> None:
    assert guard_regex(render()).search(uri) is None, uri


# --------------------------------------------------------------------------------------------------------
# With nginx installed (Debian's package, as on the router host): nginx -t, then the table through nginx
# --------------------------------------------------------------------------------------------------------

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_conf(tmp_path: Path, **overrides: Any) -> Path:
    """The rendered configuration, runnable here: its temporary directories under tmp_path, no `user` (a
    master that is not root ignores it; one that is drops to nobody, and these requests need no file)."""
    state = tmp_path / "state"
    state.mkdir()
    text = render(**overrides).replace("/var/lib/sglang-edge", str(state)).replace("user www-data;\n", "")
    conf = tmp_path / "edge.conf"
    conf.write_text(text)
    return conf


def self_signed(directory: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=edge",
         "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
        check=True, capture_output=True,
    )  # fmt: skip


@needs_nginx
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_nginx_accepts_the_rendered_configuration(tmp_path: Path, tls: bool) -> None:
    if tls:
        if shutil.which("openssl") is None:
            pytest.skip("openssl is not installed")
        self_signed(tmp_path)
    conf = local_conf(
        tmp_path, __sglang_router_tls=tls, __sglang_router_tls_dir=str(tmp_path),
        sglang_router_host="127.0.0.1", sglang_router_port=free_port(),
    )  # fmt: skip
    checked = subprocess.run(
        [NGINX, "-t", "-q", "-e", "stderr", "-g", f"pid {tmp_path}/nginx.pid;", "-c", str(conf)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr


class StandInSmg(http.server.BaseHTTPRequestHandler):
    """smg behind the edge: records the request target it got, answers 200."""

    seen: list[str]

    def answer(self) -> None:
        self.seen.append(self.path)
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, list[str]]]:
    """A real nginx with the rendered configuration on a free loopback port, in front of StandInSmg: its port
    and the targets smg got."""
    if NGINX is None:
        pytest.skip("nginx is not installed")
    tmp_path = tmp_path_factory.mktemp("edge")
    seen: list[str] = []
    handler = type("Handler", (StandInSmg,), {"seen": seen})
    smg = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=smg.serve_forever, daemon=True).start()
    port = free_port()
    conf = local_conf(
        tmp_path, sglang_router_host="127.0.0.1", sglang_router_port=port,
        sglang_router_upstream_port=smg.server_address[1],
    )  # fmt: skip
    nginx = subprocess.Popen(
        [NGINX, "-e", "stderr", "-g", f"daemon off; pid {tmp_path}/nginx.pid;", "-c", str(conf)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if nginx.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"nginx did not start: {nginx.stderr.read().decode()}") from None
                time.sleep(0.1)
        yield port, seen
    finally:
        nginx.send_signal(signal.SIGQUIT)
        try:
            nginx.wait(timeout=10)
        except subprocess.TimeoutExpired:
            nginx.kill()
            nginx.wait()
        smg.shutdown()


def ask(port: int, uri: str) -> tuple[int, bytes]:
    """GET ``uri`` exactly as given (a raw request line: no client normalizes it), with the clients' key."""
    request = (
        f"GET {uri} HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {CLIENT_KEY}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@needs_nginx
@pytest.mark.parametrize("uri", REFUSED)
def test_nginx_refuses_the_path_and_smg_never_sees_it(edge: tuple[int, list[str]], uri: str) -> None:
    port, seen = edge
    before = len(seen)
    status, body = ask(port, uri)
    assert status == 400, (uri, status, body)
    assert len(seen) == before, (uri, seen[before:])


@needs_nginx
@pytest.mark.parametrize("uri", ALLOWED)
def test_nginx_passes_a_normal_path_to_smg_as_sent(edge: tuple[int, list[str]], uri: str) -> None:
    port, seen = edge
    before = len(seen)
    status, body = ask(port, uri)
    assert status == 200, (uri, status, body)
    assert seen[before:] == [uri]


@needs_nginx
def test_the_headline_paths_are_refused_by_the_edges_rule_not_by_nginx_itself(
    edge: tuple[int, list[str]],
) -> None:
    """nginx answers some paths 400 on its own (/../ above the root); these three it would have resolved and
    passed on: the edge's rule refuses them, with its own answer."""
    port, _ = edge
    for uri in ("/v1/../workers", "/v1/%2e%2e/workers", "/v1%2fworkers"):
        status, body = ask(port, uri)
        assert (status, b"dot-segment or an encoded slash" in body) == (400, True), (uri, body)
