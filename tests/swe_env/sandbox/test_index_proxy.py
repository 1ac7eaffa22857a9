"""The env build's index proxy (swe_env/sandbox/index_proxy.py), host side, on real sockets: it opens tunnels to
the allowed hosts only, directly or through the host's own https proxy, and answers everything else with 403."""

from __future__ import annotations

import base64
import socket
import threading
from pathlib import Path

import pytest

from swe_env.sandbox.index_proxy import IndexProxy


def _server(handle) -> tuple[socket.socket, int]:
    """A loopback TCP server that runs handle(conn) for each connection, in a thread."""
    server = socket.create_server(("127.0.0.1", 0))

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return server, server.getsockname()[1]


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(1024):
            conn.sendall(data)


def _ask(proxy: IndexProxy, request: bytes) -> tuple[bytes, socket.socket]:
    """Send a request to the proxy's socket; its status line and the open connection."""
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(10)
    client.connect(str(proxy.socket_path))
    client.sendall(request)
    head = b""
    while not head.endswith(b"\r\n\r\n") and (byte := client.recv(1)):
        head += byte
    return head.split(b"\r\n")[0], client


@pytest.fixture
def echo_port():
    server, port = _server(_echo)
    yield port
    server.close()


def test_a_tunnel_opens_to_an_allowed_host_only(tmp_path: Path, echo_port: int, monkeypatch):
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    with IndexProxy(tmp_path / "net", frozenset({("127.0.0.1", echo_port)})) as proxy:
        status, conn = _ask(proxy, f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode())
        assert status == b"HTTP/1.1 200 Connection established"
        conn.sendall(b"through the tunnel")
        assert conn.recv(100) == b"through the tunnel"
        conn.close()
        for request in (
            f"CONNECT 127.0.0.1:{echo_port + 1} HTTP/1.1\r\n\r\n",  # another port of the same host
            f"CONNECT localhost:{echo_port} HTTP/1.1\r\n\r\n",  # the same port by another name
            f"GET http://127.0.0.1:{echo_port}/ HTTP/1.1\r\n\r\n",  # plain HTTP through the proxy
            "garbage\r\n\r\n",
            f"CONNECT 127.0.0.1:{echo_port}\xb2 HTTP/1.1\r\n\r\n",  # a digit that is no ASCII digit
        ):
            status, conn = _ask(proxy, request.encode("latin-1"))
            conn.close()
            assert status == b"HTTP/1.1 403 Forbidden", request
        assert len(proxy.refused) == 5
    assert not (tmp_path / "net" / "index.sock").exists()


def test_the_hosts_own_proxy_carries_the_tunnel(tmp_path: Path, echo_port: int, monkeypatch):
    seen: list[bytes] = []

    def upstream(conn: socket.socket) -> None:  # a host https proxy that asks for credentials
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += conn.recv(1)
        seen.append(head)
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
        _echo(conn)

    server, port = _server(upstream)
    monkeypatch.setenv("https_proxy", f"http://alice:s%40cret@127.0.0.1:{port}")
    monkeypatch.setenv("no_proxy", "")
    try:
        with IndexProxy(tmp_path / "net", frozenset({("pypi.org", 443)})) as proxy:
            status, conn = _ask(proxy, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n")
            conn.sendall(b"hello")
            assert status.endswith(b"200 Connection established")
            assert conn.recv(100) == b"hello"
            conn.close()
    finally:
        server.close()
    token = base64.b64encode(b"alice:s@cret").decode()
    assert seen and seen[0].startswith(b"CONNECT pypi.org:443 HTTP/1.1\r\n")
    assert f"Proxy-Authorization: Basic {token}".encode() in seen[0]
