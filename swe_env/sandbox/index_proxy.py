"""The one way out of an env build's sandbox: a host-side proxy that opens tunnels to the package index only.

An env build runs the repo's own install code (setup.py, a build backend), so it gets what an agent's step gets
(its own network namespace, the step's limits, the sandbox's user) plus this: a unix socket, bound into the
sandbox, where this proxy accepts HTTP CONNECT to the index's host (and PyPI's file host when the index is PyPI's)
on the index's port, and nothing else. Inside, `pip_relay.py` makes that socket pip's proxy at 127.0.0.1:PORT.
The proxy itself opens the index as the host would: directly, or through the host's own https proxy
(HTTPS_PROXY, NO_PROXY) when one is set; the build never sees that proxy or its credentials.
So the build reaches no host loopback port and no abstract unix socket (both belong to the host's network
namespace), no other host of the network, and it resolves no name itself (the proxy does).

pip gets only what it needs (`pip_environment`): the index URL the user chose (`PyEnvConfig.index_url`, from
NEXUS_PIP_INDEX_URL, default PyPI), the proxy, the system's CA bundle, and no config file; never the host's PIP_*
variables, proxies or pip.conf (they may hold credentials for something else).
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import threading
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlsplit

from swe_env.sandbox.base import SandboxError

RELAY_PORT = 3128  # pip's proxy inside the build's own network namespace
INSIDE_SOCKET = "/run/nexus/index.sock"
INSIDE_RELAY = "/run/nexus/pip_relay.py"
PYPI_FILES = {"pypi.org": ("files.pythonhosted.org",)}  # an index whose files live on another host
CA_FILES = ("/etc/ssl", "/etc/ca-certificates", "/etc/pki")  # what TLS needs to check the index's certificate
HEAD_CAP = 8 << 10  # bytes of a CONNECT request the proxy reads
MAX_TUNNELS = 64  # at once; more wait in the listen queue
IDLE_S = 300  # a tunnel with nothing to copy for this long is closed


def allowed_hosts(index_url: str, extra: tuple[str, ...] = ()) -> frozenset[tuple[str, int]]:
    """(host, port) pairs a build may open: the index's own, its file host, and `extra` (host or host:port)."""
    parts = urlsplit(index_url)
    if parts.scheme != "https" or not parts.hostname:
        raise SandboxError(f"the package index must be an https:// URL, not {index_url!r} (NEXUS_PIP_INDEX_URL)")
    host, port = parts.hostname.lower(), parts.port or 443
    out = {(host, port), *((h, 443) for h in PYPI_FILES.get(host, ()))}
    for item in extra:
        name, _, p = item.lower().partition(":")
        out.add((name, int(p) if p else 443))
    return frozenset(out)


def shown(index_url: str) -> str:
    """The index URL as messages show it: without the credentials a private index's URL may hold."""
    parts = urlsplit(index_url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def pip_environment(index_url: str) -> dict[str, str]:
    """The variables a build gets for pip (and any tool that honours https_proxy): nothing from the host's."""
    proxy = f"http://127.0.0.1:{RELAY_PORT}"
    env = {"PIP_INDEX_URL": index_url, "PIP_PROXY": proxy, "https_proxy": proxy, "HTTPS_PROXY": proxy}
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    if os.path.isfile(bundle):
        env.update({"PIP_CERT": bundle, "SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle})
    return env


def relay_command(python: str) -> str:
    """The build script's first line: the relay listens before pip runs."""
    return f"{python} {INSIDE_RELAY} {RELAY_PORT} {INSIDE_SOCKET}\n"


class IndexProxy:
    """The proxy of one build, serving on `folder/index.sock` while the `with` block lasts.

    folder: a fresh folder of the sandbox's workspace; gid: the group that may connect (the sandbox's user), or
    None to leave the socket to the current user."""

    def __init__(self, folder: Path, allowed: frozenset[tuple[str, int]], gid: int | None = None) -> None:
        self.allowed = allowed
        self.folder = folder
        folder.mkdir(mode=0o710)
        self.socket_path = folder / "index.sock"
        self.relay_path = folder / "pip_relay.py"
        shutil.copyfile(Path(__file__).with_name("pip_relay.py"), self.relay_path)
        self.relay_path.chmod(0o644)
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(self.socket_path))
        self.socket_path.chmod(0o660)
        if gid is not None:
            for p in (folder, self.socket_path, self.relay_path):
                os.chown(p, 0, gid)
        self._server.listen(MAX_TUNNELS)
        self._slots = threading.BoundedSemaphore(MAX_TUNNELS)
        self.refused: list[str] = []  # the requests turned away (for the build's error message)
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def bind_args(self) -> list[str]:
        """bwrap arguments that put the socket and the relay into the sandbox."""
        return ["--ro-bind", str(self.socket_path), INSIDE_SOCKET, "--ro-bind", str(self.relay_path), INSIDE_RELAY]

    def __enter__(self) -> IndexProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self._server.close()
        self.socket_path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            if not self._slots.acquire(timeout=30):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            target = self._read_connect(conn)
            if target is None:
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            try:
                upstream = open_upstream(target)
            except OSError:
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            _tunnel(conn, upstream)
        except OSError:
            pass
        finally:
            conn.close()
            self._slots.release()

    def _read_connect(self, conn: socket.socket) -> tuple[str, int] | None:
        """The (host, port) of a CONNECT request the proxy allows, else None (and the request is recorded)."""
        conn.settimeout(30)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < HEAD_CAP:
            chunk = conn.recv(HEAD_CAP - len(head))
            if not chunk:
                break
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = line.partition(" ")
        host, _, port = rest.split(" ", 1)[0].rpartition(":")
        target = (host.lower().strip("[]"), int(port)) if port.isascii() and port.isdigit() else None
        if method != "CONNECT" or target not in self.allowed:
            if len(self.refused) < 20:
                self.refused.append(line[:200])
            return None
        return target


def open_upstream(target: tuple[str, int]) -> socket.socket:
    """A connection to the index host: direct, or a tunnel through the host's https proxy when it has one."""
    proxy = urllib.request.getproxies().get("https")
    if not proxy or urllib.request.proxy_bypass(target[0]):
        return socket.create_connection(target, timeout=30)
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=30)
    auth = ""
    if parts.username is not None:
        token = base64.b64encode(f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()).decode()
        auth = f"Proxy-Authorization: Basic {token}\r\n"
    host = f"{target[0]}:{target[1]}"
    sock.sendall(f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n") and len(head) < HEAD_CAP:  # byte by byte: nothing of the tunnel is read
        byte = sock.recv(1)
        if not byte:
            break
        head += byte
    if head.split(b" ", 2)[1:2] != [b"200"]:
        sock.close()
        raise OSError(f"the host's proxy refused {host}: {head[:80]!r}")
    return sock


def _tunnel(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides are done (or one is idle for IDLE_S)."""
    for s in (a, b):
        s.settimeout(IDLE_S)
    other = threading.Thread(target=_copy, args=(b, a), daemon=True)
    other.start()
    _copy(a, b)
    other.join()
    b.close()


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
