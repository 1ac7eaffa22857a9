"""The listener of `nexus-agent serve`: uvicorn (HTTP/1.1 by h11, on asyncio) serving server.asgi's app on a socket
bound here, so that port 0 works and the port is known before the server runs.

Limits (ServeConfig): the listen backlog; at most `max_connections` open connections (uvicorn's limit_concurrency:
more get HTTP 503); an idle keep-alive connection closes after `keep_alive_s`; a request's headers must arrive
within `header_timeout_s` of the connection (or of the previous response), else the connection is closed, so that a
client dribbling its headers (slowloris) holds one socket for a while and nothing else. TLS: uvicorn speaks it with
server.tls's context (its checks and messages; TLS 1.2 at least), each handshake on the event loop. A client that
half-closes (shutdown(SHUT_WR)) after a whole request gets its answer, except on a chat route, where it is taken as gone
and its turn cancelled (HeaderDeadline._answers_half_closed).

Shutdown (SIGTERM/SIGINT in `serve`, or `Server.close`): stop accepting connections, then `on_shutdown` (server.app:
the drain, server.drain, during which the open connections are served as before, a new chat request on one getting
HTTP 503; then the scheduler stops and every reply still in flight ends: a stream with an error event, a plain
request with HTTP 503), then let the connections finish writing (SHUTDOWN_GRACE_S), return. A second signal during
the drain ends it at once (`on_signal_again`); after the drain, a second SIGINT stops waiting for the connections
(uvicorn's own rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import resource
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterator

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from server import api
from server.asgi import CHAT_PATHS
from server.config import ServeConfig, ServeError

BAD_REQUEST = "malformed HTTP request (its request line or a header, e.g. a Content-Length that is not a number)"
# after the drain and the scheduler's stop, how long connections may take to send their last bytes: uvicorn's
# timeout_graceful_shutdown, whose clock starts only once on_shutdown (the drain) has returned, so it never cuts a
# connection whose turn is still draining (every turn is then answered: only its last bytes are left to write)
SHUTDOWN_GRACE_S = 5.0
LINGER_S = 2.0  # closing before a request was read whole: at most how long its last bytes are read and dropped


def bind(config: ServeConfig) -> socket.socket:
    """The listening socket of `config.host:config.port` (port 0: any free one), with the configured backlog."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
        sock.listen(config.backlog)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    return sock


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose next request's headers do not arrive in time, and closing
    a connection whose request body is still arriving only once the client has stopped sending (`_linger`)."""

    def __init__(self, *args, header_timeout_s: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s
        self._deadline: asyncio.TimerHandle | None = None
        self._lingering = False  # closing: what the client still sends is dropped until it stops
        self._raw: asyncio.Transport | None = None  # the socket's own transport (self.transport: _Lingering)
        # the connection limit, checked by self.app (uvicorn's own check would answer in plain text, not JSON)
        self.max_connections, self.limit_concurrency = self.limit_concurrency, None
        self.app = functools.partial(self._within_limit, self.app)

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(_Lingering(transport, self))
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    async def _within_limit(self, app, scope, receive, send) -> None:
        """`app`, or HTTP 503 as JSON past `max_connections` open connections (or as many requests running: this
        one's task is among them), as uvicorn's limit_concurrency, whose answer would be plain text."""
        limit = self.max_connections
        if limit is None or (len(self.connections) < limit and len(self.tasks) <= limit):
            return await app(scope, receive, send)
        self.logger.warning("Exceeded concurrency limit.")
        message = f"server busy: {limit} connections are open, its limit (max_connections); retry shortly"
        error = ServeError(message, 503, "server_busy")
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"5"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(api.error_body(error)).encode()})

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse (a bad request line or header, e.g. a Content-Length that is not a number):
        HTTP 400 with the JSON error body of every other answer, then the connection closes."""
        body = json.dumps(api.error_body(ServeError(f"{BAD_REQUEST}: {msg}"))).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()  # lingers (_Lingering): the rest of the request may still be arriving

    def _linger(self) -> None:
        """Close once the client has stopped sending, at most LINGER_S from now (a lingering close). Closing a socket
        with the client's bytes still unread in it resets the connection, and the client could then lose the answer
        (a 400, a 413 for a body too large, a 408) before reading it; so the answer's side is shut, and what still
        arrives is read and dropped."""
        if self._lingering:
            return
        self._lingering = True
        raw = self._raw
        if raw.can_write_eof():
            raw.write_eof()
        raw.resume_reading()  # a body's flow control may have paused it
        self.loop.call_later(LINGER_S, raw.close)

    def data_received(self, data: bytes) -> None:
        if not self._lingering:
            super().data_received(data)

    def eof_received(self) -> bool | None:
        """The client shut its side: a lingering close ends; a request that may still be answered keeps the answer's
        side open (True), then the connection closes after the answer; otherwise the connection closes now."""
        if self._lingering:
            self._raw.close()
            return None
        if self._answers_half_closed():
            self.cycle.keep_alive = False
            return True
        return None  # the client is gone: uvicorn sees the connection lost, and a chat turn is cancelled

    def _answers_half_closed(self) -> bool:
        """Whether a client that shut its sending side (shutdown(SHUT_WR)) after a whole request still gets the
        answer: yes, unless the request is a chat turn, or the connection is TLS (asyncio's TLS transport closes on
        the client's end of stream, whatever eof_received says). A chat turn's client is taken as gone: until the
        server writes, a client that half-closed looks the same as one that closed its socket (nginx's rule too),
        and a turn whose client closed is cancelled, not decoded to its max_tokens for nobody."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self.scheme != "http" or self.conn.their_state is not h11.DONE:
            return False
        return cycle.scope["path"].rstrip("/") not in CHAT_PATHS

    def _arm(self) -> None:
        """Close the connection unless a new request (a new cycle) has begun within the timeout."""
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._expire, self.cycle)

    def _expire(self, cycle) -> None:
        if self.cycle is cycle and not self.transport.is_closing():
            self.transport.close()


class Uvicorn(uvicorn.Server):
    """uvicorn's server with the shutdown `serve` needs: `on_shutdown` (the drain, then the scheduler's stop) runs
    once the listener is closed and before uvicorn waits for the connections; a signal that comes again while it
    runs goes to `on_signal_again` (ending the drain: True), else to uvicorn; a signal is not raised again
    afterwards (exit status 0)."""

    def __init__(
        self, config: uvicorn.Config, on_shutdown: Callable[[], None], on_signal_again: Callable[[], bool]
    ) -> None:
        super().__init__(config)
        self.on_shutdown, self.on_signal_again = on_shutdown, on_signal_again

    def handle_exit(self, sig: int, frame) -> None:
        if self.should_exit and self.on_signal_again():  # a second signal during the drain: it ends now
            return
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handlers = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in getattr(self, "servers", []):
            server.close()  # accept no more connections
        await asyncio.to_thread(self.on_shutdown)
        await super().shutdown(sockets)


def make_uvicorn(
    app, config: ServeConfig, context: ssl.SSLContext | None, on_shutdown, on_signal_again, verbose: bool
) -> Uvicorn:
    """The uvicorn server of the ASGI `app` with the limits of `config` (TLS: `context`, from server.tls);
    `on_shutdown` and `on_signal_again`: see Uvicorn."""
    _log_setup(verbose)
    tls = {}
    if context is not None:  # uvicorn builds no context of its own: this one carries server.tls's checks
        tls = {"ssl_certfile": str(config.tls_cert), "ssl_context_factory": lambda _config, _default: context}
    settings = uvicorn.Config(
        app, lifespan="off", log_config=None, access_log=verbose, backlog=config.backlog,
        limit_concurrency=config.max_connections, timeout_keep_alive=config.keep_alive_s,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        http=functools.partial(HeaderDeadline, header_timeout_s=config.header_timeout_s), **tls,
    )  # fmt: skip
    return Uvicorn(settings, on_shutdown, on_signal_again)


def raise_fd_limit(connections: int) -> None:
    """Raise this process's open-file limit towards `connections` plus room for its own files (up to the hard limit),
    so that the connection limit, not the file limit, is what a flood of connections meets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 256 if hard == resource.RLIM_INFINITY else min(hard, connections + 256)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _log_setup(verbose: bool) -> None:
    """uvicorn's log: one line per request and per refused connection with --verbose, else only its errors."""
    log = logging.getLogger("uvicorn")
    log.setLevel(logging.INFO if verbose else logging.ERROR)
    if verbose and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)


class _Lingering:
    """A connection's transport as uvicorn sees it: its `close` lingers (HeaderDeadline._linger) while the client's
    request may still be arriving, its body unread (an answer given before reading it: 413, 408) or the request
    unparsable (400); everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, protocol: HeaderDeadline) -> None:
        self._transport, self._protocol = transport, protocol

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def close(self) -> None:
        if self._protocol.conn.their_state in (h11.SEND_BODY, h11.ERROR) and not self._transport.is_closing():
            self._protocol._linger()
        else:
            self._transport.close()
