"""The one client of OpenAI-compatible servers (a `nexus-agent serve`, vLLM, SGLang, a hosted API), on the openai
package: the agent's model backend, chat --server, eval --server, the profile uploads and bench serve all talk
through it, so a key, a timeout, a retry or an error reads the same everywhere.

It uses openai's transport, server-sent-events decoder and error classes, through the generic `get`/`post`/`delete`
that take any path: the chat completions as plain JSON (the `nexus` field of a `nexus-agent serve` answer kept as
sent), and the nexus-only endpoints (/v1/sessions, /v1/nexus/profiles) beside them. openai is imported on the first
request only: it takes about a second to import, which `--help` and the commands without a server never pay.

Retries are this module's (openai's own are off): a 5xx or 429 answer (after its Retry-After, up to a minute) or a
connection error is tried again, another 4xx, a TLS failure (no retry mends a certificate) or a stream that has begun
(its pieces were handed on) is not. `timeout_s` bounds each attempt as a whole (connect, and every read of the answer
to its end, streamed or not) and `max_answer_bytes` what one answer may be (agent.backends.limits): a server that
trickles its answer or never sends one costs `timeout_s` per attempt, one that sends too much is cut off, not asked
again. What a server sent that ends up in an error's text is made one printable line: no terminal escape sequence or
control character of a hostile server reaches the user's terminal.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai

from agent.backends.limits import ANSWER_MAX_BYTES, AnswerEncoded, AnswerTooLarge, bound, limited, refuse_encoded
from agent.errors import AgentError

API_KEY_ENV = "OPENAI_API_KEY"  # where every client of this project finds the server's API key
SESSION_HEADER = "X-Nexus-Session"  # names the `nexus-agent serve` session a request continues
T = TypeVar("T")
RETRY_AFTER_MAX_S = 60.0  # the longest Retry-After of a 429/503 answer that is waited for
_ESCAPES = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]?|\x9b[0-?]*[ -/]*[@-~]?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


class ServerError(AgentError):
    """A request the server refused (`status`: its HTTP status, `detail`: its message) or that got no answer
    (`status` None, `detail`: why: refused, timed out, a certificate); the text is one line that names the URL."""

    def __init__(self, message: str, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status, self.detail = status, detail


@dataclass
class ServerClient:
    """Where a server is and how to talk to it; one openai client (and its connection pool) per instance."""

    base_url: str  # up to and including /v1
    api_key: str | None = field(default=None, repr=False)  # the key itself (--api-key); None: from api_key_env
    api_key_env: str = API_KEY_ENV  # environment variable holding the key; unset = no Authorization header
    timeout_s: float = 600.0  # seconds one attempt of a request may take, all of it (connect, every read)
    retries: int = 0  # extra attempts after a connection error or a 5xx answer
    max_answer_bytes: int = ANSWER_MAX_BYTES  # most bytes one answer may be (a JSON body, a stream's events)

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s < math.inf or self.max_answer_bytes < 1:
            raise ValueError(f"ServerClient: timeout_s {self.timeout_s}, max_answer_bytes {self.max_answer_bytes}")

    @property
    def key(self) -> str:
        return (self.api_key or os.environ.get(self.api_key_env, "")).strip()

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def get(self, path: str, timeout_s: float | None = None) -> Any:
        return self.call("get", path, timeout_s=timeout_s)

    def post(self, path: str, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        return self.call("post", path, body, timeout_s=timeout_s)

    def delete(self, path: str, timeout_s: float | None = None) -> Any:
        return self.call("delete", path, timeout_s=timeout_s)

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None,
        timeout_s: float | None = None, consume: Callable[[Iterator[dict[str, Any]]], T] | None = None,
    ) -> Any:  # fmt: skip
        """The answer's JSON; with `consume`, a streamed request whose events (dicts) it reads, and what it returns.
        ServerError, one line, for an HTTP error or no answer, after the retries."""

        url, seconds = self.url(path), self.timeout_s if timeout_s is None else timeout_s
        for attempt in range(self.retries + 1):
            begun, wait = [False], min(2.0**attempt, 10.0)
            try:
                with limited(seconds, self.max_answer_bytes) as limit:
                    return self._attempt(url, method, path, body, headers, seconds, consume, begun)
            except openai.APIStatusError as exc:
                if (exc.status_code < 500 and exc.status_code != 429) or attempt == self.retries:
                    detail = _detail(exc)
                    text = f"{url}: HTTP {exc.status_code}" + (f": {detail}" if detail else "")
                    raise ServerError(text, exc.status_code, detail) from None
                wait = max(wait, _retry_after(exc))
            except openai.APIConnectionError as exc:  # no answer (timeouts too), or a stream that broke off
                root = _root(exc)
                why = printable(str(root))
                if limit.expired:  # the whole attempt's time is up: retried while nothing was handed on
                    why = f"no complete answer within {seconds:g} s"
                    if begun[0] or attempt == self.retries:
                        raise ServerError(f"{url}: {why}", None, why) from None
                elif begun[0]:
                    msg = f"the connection to the model server broke mid-reply ({url}: {why})"
                    raise ServerError(msg, None, why) from None
                elif isinstance(root, ssl.SSLError) or attempt == self.retries:  # no retry mends a TLS setup
                    hint = tls_hint(url, exc)
                    msg = f"cannot reach the model server at {url}: {why}{hint and '; '}{hint}"
                    raise ServerError(msg, None, why) from None
            except AnswerTooLarge:  # the connection is closed; asking again would bring the same
                why = f"the answer exceeded {self.max_answer_bytes / 2**20:g} MiB"
                raise ServerError(f"{url}: {why}", None, why) from None
            except AnswerEncoded as exc:
                why = f"the answer came {printable(str(exc), 40)}-encoded though asked for none"
                raise ServerError(f"{url}: {why}", None, why) from None
            except openai.APIError as exc:  # an error event in a stream, or an answer openai could not read
                raise ServerError(f"{url}: {_message(exc)}") from None
            except json.JSONDecodeError:  # a body (or a streamed event) that says it is JSON and is not
                raise ServerError(f"{url}: the answer is not JSON", None, "the answer is not JSON") from None
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _attempt(self, url, method, path, body, headers, seconds, consume, begun: list[bool]) -> Any:
        """One try: the answer's JSON, or what `consume` returns of its stream (`begun` set once an event came)."""
        if consume is None:
            answer = self._send(method, path, body, headers, seconds, stream=False)
            if not isinstance(answer, (dict, list)):
                raise ServerError(f"{url}: the answer is not JSON", None, "the answer is not JSON")
            return answer
        events = self._send(method, path, body, headers, seconds, stream=True)
        kind = events.response.headers.get("content-type", "")
        if "event-stream" not in kind:  # a server or proxy that ignores "stream": no event would come
            events.response.close()
            raise ServerError(f"{url}: asked to stream, the server answered {printable(kind, 60) or 'no'} "
                              "content instead of server-sent events (text/event-stream)")  # fmt: skip
        return consume(_marked(events, begun))

    def _send(self, method, path, body, headers, seconds: float, stream: bool) -> Any:

        sent: dict[str, Any] = {} if self.key else {"Authorization": openai.Omit()}  # no key: no Authorization
        sent["Accept-Encoding"] = "identity"  # what is counted against max_answer_bytes is what the answer is
        options: dict[str, Any] = {"headers": sent | (headers or {}), "timeout": seconds}
        trust = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))  # read when a client is made
        client = _openai_client(self.base_url, self.key or "none", trust)
        if method == "get":
            return client.get(path, cast_to=object, options=options)
        if method == "delete":
            return client.delete(path, cast_to=object, options=options)
        if stream:
            return client.post(path, body=body, cast_to=object, options=options, stream=True,
                               stream_cls=openai.Stream[object])  # fmt: skip
        return client.post(path, body=body, cast_to=object, options=options)


@functools.lru_cache(maxsize=16)
def _openai_client(base_url: str, key: str, trust: tuple[str | None, str | None]):
    """One openai client per server, key and trusted certificates (`trust`) in this process: its connections are
    kept and shared by threads."""

    for name in ("openai", "httpx", "httpx2", "httpcore"):  # one INFO line per request once any library (swebench
        quiet = logging.getLogger(name)  # does, in eval) configures the root logger: not for a user's terminal
        if quiet.level == logging.NOTSET:
            quiet.setLevel(logging.WARNING)
    http = bound(openai.DefaultHttpxClient(event_hooks={"response": [refuse_encoded]}))  # held to each Limit
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, http_client=http)


def _marked(events: Iterator[Any], begun: list[bool]) -> Iterator[dict[str, Any]]:
    """The stream's events; `begun` is set once the first arrived (from then on the request is not retried)."""
    for event in events:
        begun[0] = True
        yield event


def printable(text: str, limit: int = 300) -> str:
    """`text` (a server's words) as one line of at most `limit` characters that a terminal only prints: escape
    sequences dropped, other control characters (newlines, NUL) made spaces."""
    return _CONTROLS.sub(" ", _ESCAPES.sub("", text[: limit * 4])).strip()[:limit]


def _retry_after(exc: Any) -> float:
    """The seconds a 429/503 answer's Retry-After asks for (at most RETRY_AFTER_MAX_S); 0 without one."""
    try:
        return min(max(float(exc.response.headers.get("retry-after", "")), 0.0), RETRY_AFTER_MAX_S)
    except (ValueError, AttributeError):  # absent, or an HTTP date (the backoff applies)
        return 0.0


def _detail(exc: Any) -> str:
    """The message of an OpenAI-style error answer, else the start of its body."""
    body = exc.body
    if isinstance(body, dict):
        return printable(str(body.get("message", body)))
    try:
        return printable(exc.response.text)
    except Exception:  # a streamed answer's body may be unread
        return printable(str(body or exc.message))


def _message(exc: Any) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    return printable(str(body.get("message") or exc.message))


def _root(exc: BaseException) -> BaseException | str:
    """The innermost cause (`[Errno 111] Connection refused`, a certificate failure) of a connection error."""
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    return exc if str(exc) else type(exc).__name__  # type: ignore[return-value]  (a bare timeout has no text)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def tls_hint(url: str, exc: BaseException) -> str:
    """What to try when a connection to `url` failed over TLS, or perhaps for the lack of it; "" otherwise."""
    chain = list(_chain(exc))
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        return (
            "its TLS certificate is not trusted here: for a self-signed one (nexus-agent serve --tls-cert), set "
            "SSL_CERT_FILE to that certificate"
        )
    if any(isinstance(e, ssl.SSLError) for e in chain) and url.startswith("https:"):
        return "it does not speak TLS there: give http://"
    dropped = any(isinstance(e, ConnectionResetError) or type(e).__name__ == "RemoteProtocolError" for e in chain)
    if dropped and url.startswith("http:"):
        return "if the server was started with --tls-cert, give https://"
    return ""
