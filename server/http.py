"""The HTTP side (stdlib, one thread per connection): /v1/chat/completions (JSON or SSE), /v1/models, /metrics,
/health, /v1/sessions (list, DELETE one), /v1/nexus/profiles (POST: server.profiles). Each chat request is parsed
here, matched to its session by the registry and handed to the scheduler, whose events (text pieces, the result, an
error) this thread turns into the answer. A server started with an API key answers every route but /health and
/metrics with HTTP 401 unless the request carries "Authorization: Bearer <key>". A server started with a TLS
certificate speaks HTTPS only (server.tls: each connection's handshake runs in its own thread)."""

from __future__ import annotations

import hmac
import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from server import api, tls
from server.batching import Job, internal_error
from server.config import ServeError

if TYPE_CHECKING:
    from server.app import Server

OPEN_PATHS = ("/health", "/metrics")  # answered without the API key (load balancers, Prometheus scrapers)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
        if self.server.app.verbose:
            super().log_message(format, *args)

    # --- routes ---------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        app = self.server.app
        path = self._route()
        if self._refused(path):
            return
        if path in ("/v1/models", "/models"):
            self._json(200, api.models(app.config, app.started))
        elif path == "/metrics":
            self._send(200, app.metrics_text().encode(), "text/plain; version=0.0.4")
        elif path == "/health":
            self._json(200, {"status": "ok", "model": app.config.model_id})
        elif path == "/v1/sessions":
            self._json(200, {"object": "list", "data": app.sessions_info()})
        else:
            self._error(ServeError(f"no route GET {path}", 404, "not_found"))

    def do_DELETE(self) -> None:  # noqa: N802
        path = self._route()
        if self._refused(path):
            return
        if not path.startswith("/v1/sessions/"):
            self._error(ServeError(f"no route DELETE {path}", 404, "not_found"))
            return
        sid = path.rsplit("/", 1)[1]
        try:
            found = self.server.app.registry.close(sid)
        except ServeError as exc:
            self._error(exc)
            return
        if found:
            self._json(200, {"id": sid, "object": "session", "deleted": True})
        else:
            self._error(ServeError(f"no session {sid}", 404, "not_found"))

    def do_POST(self) -> None:  # noqa: N802
        path = self._route()
        if self._refused(path):
            return
        if path == "/v1/nexus/profiles":
            self._profiles()
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._error(ServeError(f"no route POST {path}", 404, "not_found"))
            return
        app = self.server.app
        try:
            req = api.parse_request(self._body(), self.headers.get(api.SESSION_HEADER), app.config)
            job = app.submit(req)
        except ServeError as exc:
            self._error(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a request must never go unanswered
            self._error(internal_error(exc))
            return
        (self._stream if req.stream else self._complete)(job, req)

    def _route(self) -> str:
        return self.path.split("?")[0].rstrip("/")

    def _refused(self, path: str) -> bool:
        """True, after answering HTTP 401, when the server needs an API key and the request lacks the right one."""
        key = self.server.app.config.api_key
        if key is None or path in OPEN_PATHS:
            return False
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode()):
            return False
        self._error(ServeError(
            "this server needs an API key: send 'Authorization: Bearer <key>' (nexus-agent's clients send "
            "$OPENAI_API_KEY)", 401, "authentication_error",
        ))  # fmt: skip
        return True

    def _body(self) -> object:
        """The request's JSON body (null when empty); ServeError 400 when it is not JSON."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ServeError("the Content-Length header is not a number") from None
        try:
            return json.loads(self.rfile.read(max(0, length)) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ServeError("the request body is not valid JSON") from None

    def _profiles(self) -> None:
        try:
            answer = self.server.app.profiles(self._body())
        except ServeError as exc:
            self._error(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a request must never take the server down
            self._error(internal_error(exc))
            return
        self._count(200)
        self._json(200, answer)

    # --- chat completions ---------------------------------------------------------------------------------------
    def _complete(self, job: Job, req: api.ChatRequest) -> None:
        while True:
            kind, value = job.events.get()
            if kind == "done":
                self._count(200)
                headers = {api.SESSION_HEADER: job.entry.id}
                self._json(200, api.completion(api.new_id(), self.server.app.config.model_id, value), headers)
                return
            if kind == "error":
                self._error(value)
                return

    def _stream(self, job: Job, req: api.ChatRequest) -> None:
        cid, model = api.new_id(), self.server.app.config.model_id
        trim = api.StopTrimmer(req.stop)
        kind, value = job.events.get()
        if kind == "error":
            self._error(value)
            return
        self._count(200)
        self.send_response(200)
        for name, val in (("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"),
                          ("Connection", "close"), (api.SESSION_HEADER, job.entry.id)):  # fmt: skip
            self.send_header(name, val)
        self.end_headers()
        self.close_connection = True
        try:
            self._event(api.chunk(cid, model, {"role": "assistant", "content": ""}))
            while kind == "text":
                if piece := trim.feed(value):
                    self._event(api.chunk(cid, model, {"content": piece}))
                kind, value = job.events.get()
            if kind == "error":
                self._event(api.error_body(value))
                return
            if piece := trim.rest():
                self._event(api.chunk(cid, model, {"content": piece}))
            self._event(api.chunk(cid, model, {}, value["finish_reason"], nexus=value["nexus"]))
            if req.include_usage:
                self._event(api.chunk(cid, model, None, usage=api.usage(value)))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            job.cancelled = True  # the scheduler drops the reply and the session

    def _event(self, data: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        self.wfile.flush()

    # --- plumbing -------------------------------------------------------------------------------------------------
    def _json(self, status: int, data: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), "application/json", headers)

    def _error(self, exc: ServeError) -> None:
        self._count(exc.status)
        headers = {"Retry-After": "5"} if exc.status in (429, 503) else None
        if exc.status == 401:  # the body was left unread: closing keeps it from being taken for the next request
            headers = {"WWW-Authenticate": "Bearer", "Connection": "close"}
        self._json(exc.status, api.error_body(exc), headers)

    def _count(self, status: int) -> None:
        if self.command == "POST":
            self.server.app.metrics.request(status)

    def _send(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    app: Server
    tls: ssl.SSLContext | None = None

    def finish_request(self, request, client_address) -> None:
        """Serve one connection (in its own thread); with TLS, its handshake first, here rather than in accept()."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        try:
            conn = tls.handshake(self.tls, request)
        except (ssl.SSLError, OSError) as exc:  # plain HTTP on the TLS port, an untrusting client, a timeout
            if self.app.verbose:
                reason = getattr(exc, "reason", None) or exc
                print(f"{client_address[0]}: TLS handshake failed: {reason}", file=sys.stderr, flush=True)
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            self.shutdown_request(conn)


def make_http_server(app: Server, context: ssl.SSLContext | None = None) -> _HTTPServer:
    """The listener of `app`; with a TLS `context` (server.tls.tls_context), HTTPS only."""
    config = app.config
    try:
        httpd = _HTTPServer((config.host, config.port), Handler)
    except OSError as exc:
        raise ServeError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    httpd.app, httpd.tls = app, context
    return httpd
