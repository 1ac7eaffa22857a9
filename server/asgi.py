"""The HTTP side (Starlette on uvicorn, server.listen): /v1/chat/completions (JSON or SSE), /v1/models, /metrics,
/health, /v1/sessions (list, DELETE one), /v1/nexus/profiles (POST: server.profiles).

A chat request's body is read under the size limit (HTTP 413 from its Content-Length, or once more has arrived),
then parsed, matched to its session and tokenized in a worker thread (server.prepare) and queued on the scheduler,
whose events (text pieces, the result, an error) the event loop turns into the answer. A stream ends with a chunk
carrying its finish_reason and `data: [DONE]`, or with an error event (`data: {"error": ...}`): never silently. A
client that goes away while its reply is generated cancels it (the scheduler stops decoding for it). A server
started with an API key answers every route but /health and /metrics with HTTP 401 unless the request carries
"Authorization: Bearer <key>". Every error is OpenAI's JSON error shape: an unknown path a 404, a known one asked
with a method it does not take a 405 with `Allow`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
from typing import TYPE_CHECKING, Any, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from server import api
from server.config import ServeError, internal_error, shutting_down
from server.jobs import Job
from server.sessions import owner_of

if TYPE_CHECKING:
    from server.batching import Scheduler
    from server.config import ServeConfig
    from server.metrics import Metrics
    from server.sessions import Registry

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")  # a turn: decoded only while its client is there
OPEN_PATHS = ("/health", "/metrics")  # answered without the API key (load balancers, Prometheus scrapers)
POLL_S = 1.0  # how often a request waiting on the scheduler checks that it still runs


class Server(Protocol):
    """What the routes use of the server (server.app.Server): named here so that app imports asgi and not back."""

    config: ServeConfig
    metrics: Metrics
    registry: Registry
    scheduler: Scheduler
    started: float  # time.time() at the start (/health's uptime)
    verbose: bool

    def metrics_text(self) -> str: ...
    def sessions_info(self) -> list[dict[str, Any]]: ...
    def profiles(self, body: Any) -> dict[str, Any]: ...
    def submit(self, req: api.ChatRequest, events: Events) -> Job: ...


class Events:
    """A job's events: put by the scheduler thread, awaited on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue = loop, asyncio.Queue()

    def put(self, item: tuple[str, Any]) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    async def get(self, alive) -> tuple[str, Any]:
        """The next event; an error event once `alive()` says the scheduler stopped without answering."""
        while True:
            try:
                return await asyncio.wait_for(self.queue.get(), POLL_S)
            except TimeoutError:
                if not alive():
                    return "error", shutting_down()


def build_app(server: Server):
    """The ASGI application of `server`."""
    h = _Handlers(server)
    routes = [
        *(Route(path, h.chat, methods=["POST"]) for path in CHAT_PATHS),
        Route("/v1/models", h.models, methods=["GET"]),
        Route("/models", h.models, methods=["GET"]),
        Route("/metrics", h.metrics, methods=["GET"]),
        Route("/health", h.health, methods=["GET"]),
        Route("/v1/sessions", h.sessions, methods=["GET"]),
        Route("/v1/sessions/{sid}", h.delete_session, methods=["DELETE"]),
        Route("/v1/nexus/profiles", h.profiles, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={404: h.not_found, 405: h.not_allowed})

    async def without_trailing_slash(scope, receive, send) -> None:  # "/v1/models/" is "/v1/models"
        if scope["type"] == "http" and len(scope["path"]) > 1:
            scope = scope | {"path": scope["path"].rstrip("/") or "/"}
        await app(scope, receive, send)

    return without_trailing_slash


class _Handlers:
    def __init__(self, server: Server) -> None:
        self.server = server

    # --- routes ---------------------------------------------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        tool_template = self.server.scheduler.reference.renderer.tool_template
        return self._refused(request) or JSONResponse(
            api.models(self.server.config, self.server.started, tool_template)
        )

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(self.server.metrics_text(), media_type="text/plain; version=0.0.4")

    async def health(self, request: Request) -> Response:
        """200 while the scheduler runs (or stops for a shutdown); 503 naming its failure once it died."""
        failure = self.server.scheduler.failure
        if failure is not None:
            return error_response(self.server.scheduler.refusal())
        return JSONResponse({"status": "ok", "model": self.server.config.model_id})

    async def sessions(self, request: Request) -> Response:
        return self._refused(request) or JSONResponse({"object": "list", "data": self.server.sessions_info()})

    async def delete_session(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        sid = request.path_params["sid"]
        try:
            if not self.server.registry.close(sid):
                raise ServeError(f"no session {sid}", 404, "not_found")
        except ServeError as exc:
            return error_response(exc)
        return JSONResponse({"id": sid, "object": "session", "deleted": True})

    async def not_found(self, request: Request, exc: Exception) -> Response:
        return self._refused(request) or error_response(
            ServeError(f"no route {request.method} {request.url.path}", 404, "not_found"), self._count(request)
        )

    async def not_allowed(self, request: Request, exc: HTTPException) -> Response:
        """A known path asked with another method: HTTP 405 naming the methods it takes, in `Allow` too."""
        if refused := self._refused(request):
            return refused
        allow = ", ".join(sorted((exc.headers or {}).get("Allow", "").split(", ")))
        error = ServeError(
            f"{request.url.path} does not take {request.method}; it takes {allow}", 405, "method_not_allowed"
        )
        response = error_response(error, self._count(request))
        response.headers["Allow"] = allow
        return response

    async def profiles(self, request: Request) -> Response:
        if refused := self._refused(request):
            return refused
        try:
            body = await read_body(request, self.server.config)
            answer = await run_in_threadpool(lambda: self.server.profiles(api.parse_json(body)))
        except ClientDisconnect:
            return Response(status_code=499)
        except ServeError as exc:
            return error_response(exc, self._count(request))
        except Exception as exc:  # noqa: BLE001 - a request must never take the server down
            return error_response(internal_error(exc), self._count(request))
        self.server.metrics.request(200)
        return JSONResponse(answer)

    async def chat(self, request: Request) -> Response | ChatAnswer:
        if refused := self._refused(request):
            return refused
        events = Events(asyncio.get_running_loop())
        try:
            body = await read_body(request, self.server.config)
            headers = request.headers.get(api.SESSION_HEADER), request.headers.get("Authorization")
            req, job = await run_in_threadpool(self._submit, body, headers, events)
        except ClientDisconnect:
            return Response(status_code=499)  # nobody reads it
        except ServeError as exc:
            return error_response(exc, self._count(request))
        except Exception as exc:  # noqa: BLE001 - a request must never go unanswered
            return error_response(internal_error(exc), self._count(request))
        return ChatAnswer(self.server, req, job, events)

    def _submit(self, body: bytes, headers: tuple[str | None, ...], events: Events) -> tuple[api.ChatRequest, Job]:
        """In a worker thread: parse the body, claim the session, tokenize the new messages, queue the turn.
        `headers`: the request's session header and Authorization (whose sessions a prefix may adopt)."""
        doc = api.parse_json(body)
        req = api.parse_request(doc, headers[0], self.server.config)
        req.owner = owner_of(headers[1], doc.get("user"))  # parse_request took a dict
        return req, self.server.submit(req, events)

    # --- plumbing -------------------------------------------------------------------------------------------------
    def _refused(self, request: Request) -> Response | None:
        """HTTP 401 when the server needs an API key and the request lacks the right one; None when it may pass."""
        key = self.server.config.api_key
        if key is None or request.url.path in OPEN_PATHS:
            return None
        scheme, _, token = (request.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode()):
            return None
        return error_response(ServeError(
            "this server needs an API key: send 'Authorization: Bearer <key>' (nexus-agent's clients send "
            "$OPENAI_API_KEY)", 401, "authentication_error",
        ), self._count(request))  # fmt: skip

    def _count(self, request: Request):
        """The metrics counter of the request's answer (POST requests only), for error_response."""
        return self.server.metrics.request if request.method == "POST" else None


class ChatAnswer:
    """The answer of a queued chat turn, an ASGI app Starlette runs as the route's response: the JSON completion, or
    the SSE stream; meanwhile the client's connection is watched, and its going away cancels the turn."""

    def __init__(self, server: Server, req: api.ChatRequest, job: Job, events: Events) -> None:
        self.server, self.req, self.job, self.events = server, req, job, events

    async def __call__(self, scope, receive, send) -> None:
        watcher = asyncio.create_task(self._watch(receive, scope.get("client")))
        try:
            await (self._stream(send) if self.req.stream else self._complete(send))
        finally:
            watcher.cancel()

    async def _watch(self, receive, client) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.job.cancelled = True  # the scheduler drops the reply (and the session: its history is not the client's)
        self.events.put(("gone", None))
        if self.server.verbose:
            who = "a client" if not client else f"{client[0]}:{client[1]}"
            print(f"{who} went away mid-reply: its turn is cancelled", file=sys.stderr, flush=True)

    async def _next(self) -> tuple[str, Any]:
        return await self.events.get(self.server.scheduler.is_alive)

    async def _complete(self, send) -> None:
        kind, value = await self._next()
        while kind == "text":
            kind, value = await self._next()
        if kind == "done":
            try:
                answer = api.completion(api.new_id(), self.server.config.model_id, value)
                response = JSONResponse(answer, headers={api.SESSION_HEADER: self.job.entry.id})
            except Exception as exc:  # noqa: BLE001 - a reply that cannot be sent must not stay in its session
                self.server.registry.drop(self.job.entry)
                response = error_response(internal_error(exc, "answer"), self.server.metrics.request)
            else:
                self.server.metrics.request(200)
        elif kind == "error":
            response = error_response(value, self.server.metrics.request)
        else:
            return  # the client went away
        await response({"type": "http"}, _nothing, send)

    async def _stream(self, send) -> None:
        kind, value = await self._next()
        if kind not in ("text", "done"):
            if kind == "error":
                await error_response(value, self.server.metrics.request)({"type": "http"}, _nothing, send)
            return
        self.server.metrics.request(200)
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
                   (api.SESSION_HEADER.lower().encode(), self.job.entry.id.encode())]  # fmt: skip
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        chunks = api.ChunkStream(self.req, api.new_id(), self.server.config.model_id)
        try:
            await self._chunks(send, chunks, kind, value)
        except OSError:
            raise  # the connection's own failure
        except Exception as exc:  # noqa: BLE001 - one stream's text must never cut it silently
            error = internal_error(exc, "stream")
            self.job.cancelled = True  # the scheduler drops the reply, if it still runs
            self.server.registry.drop(self.job.entry)  # and a finished one is not kept: the client never got it
            self.server.metrics.request(error.status, error.cause)
            await send({"type": "http.response.body", "body": sse([api.error_body(error)]), "more_body": False})

    async def _chunks(self, send, chunks: api.ChunkStream, kind: str, value: Any) -> None:
        pieces = chunks.opening()
        while kind == "text":
            pieces += chunks.text(value)
            if pieces:  # (text that may begin a stop string is held back)
                await send({"type": "http.response.body", "body": sse(pieces), "more_body": True})
                pieces = []
            kind, value = await self._next()
        if kind == "done":  # the finish_reason chunk (and usage), then [DONE]
            last = sse(chunks.done(value)) + b"data: [DONE]\n\n"
        else:  # an error event (a scheduler error, shutdown); nothing when the client went away
            if kind == "error":
                self.server.metrics.failed(value.cause)
            last = sse([api.error_body(value)]) if kind == "error" else b""
        await send({"type": "http.response.body", "body": last, "more_body": False})


def sse(events: list[dict[str, Any]]) -> bytes:
    """Server-sent events of strict JSON (NaN or Infinity in an event raise ValueError, as JSONResponse does)."""
    return b"".join(b"data: " + json.dumps(data, allow_nan=False).encode() + b"\n\n" for data in events)


async def read_body(request: Request, config) -> bytes:
    """The request's body, at most `config.max_body_bytes` (ServeError 413 from Content-Length or as it arrives) and
    within `config.header_timeout_s` (ServeError 408)."""
    limit = config.max_body_bytes
    declared = request.headers.get("content-length")  # digits: h11 answers any other value (server.listen)
    if declared is not None and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(config.header_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(size, limit, "at least ")
                chunks.append(chunk)
    except TimeoutError:
        raise ServeError(f"the request body did not arrive within {config.header_timeout_s:g} s", 408) from None
    return b"".join(chunks)


def _too_large(size: int, limit: int, at_least: str = "") -> ServeError:
    return ServeError(
        f"the request body is {at_least}{size} bytes, more than this server takes ({limit} bytes, its max_body_bytes)",
        413, "request_too_large",
    )  # fmt: skip


def error_response(exc: ServeError, count=None) -> JSONResponse:
    """The JSON error answer of `exc` (`count`: the metrics counter of requests by status)."""
    if count is not None:
        count(exc.status, exc.cause)
    headers = {"Retry-After": "5"} if exc.status in (429, 503) else {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    # the body was left unread (too large, or late), or the server is going (the client reconnects to its next
    # start): the connection closes after this
    if exc.status in (408, 413) or exc.kind == "server_shutdown":
        headers["Connection"] = "close"
    return JSONResponse(api.error_body(exc), exc.status, headers)


async def _nothing() -> dict[str, Any]:
    return {"type": "http.disconnect"}
