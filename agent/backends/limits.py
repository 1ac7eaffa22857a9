"""What a model server can cost its client, bounded: the time of one whole request and the size of one answer.

agent.backends.client opens a `Limit` for each attempt of a request (`limited`); the connections of its openai
client (`bound`) hold every connect, TLS handshake, write and read of that attempt to it, at the socket: each waits
at most until the attempt's deadline, whether the server never answers or trickles its head or its body a byte at a
time, and the bytes read (the head, a JSON body, a stream's events together) are counted against its byte cap.
The answers are asked for uncompressed (Accept-Encoding: identity): a compressed one is refused (`refuse_encoded`),
since its inflated size would escape the count.

The connections are reached through the httpx client's transports and their connection pools (`_pool`,
`_network_backend`), since httpx takes no network backend of its own: tests/agent/backends/test_answer_limits.py
fails first if a new httpx moves them.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

ANSWER_MAX_BYTES = 16 * 2**20  # one answer (a chat completion, or its stream of events: ~250 bytes per token)
T = TypeVar("T")


class AnswerTooLarge(Exception):
    """The answer passed its Limit's byte cap (raised from a socket read: the connection is closed, not reused)."""


class AnswerEncoded(Exception):
    """The server compressed its answer though the request asked for none (the encoding: args[0])."""


@dataclass
class Limit:
    """One attempt of a request: `seconds` from now for all of it, at most `max_bytes` read."""

    seconds: float  # the whole attempt: connect, the request sent, the answer read to its end
    max_bytes: int  # bytes read from the server (its head, and its body as sent)
    deadline: float = field(init=False)  # time.monotonic() at which the attempt fails
    received: int = 0  # bytes read so far
    expired: bool = False  # set when the deadline, not another timeout, ended the attempt

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.seconds


_LIMIT: contextvars.ContextVar[Limit | None] = contextvars.ContextVar("nexus_server_limit", default=None)


@contextmanager
def limited(seconds: float, max_bytes: int) -> Iterator[Limit]:
    """The requests of this thread in the block are held to one new Limit."""
    token = _LIMIT.set(limit := Limit(seconds, max_bytes))
    try:
        yield limit
    finally:
        _LIMIT.reset(token)


def bound(http: Any) -> Any:
    """`http` (an httpx client, openai's transport) with every connection it opens held to the current Limit. An
    httpx whose insides differ is used as it is, with a warning: each read then waits the whole timeout, unbounded
    in all, rather than no request working at all."""
    try:
        for transport in (http._transport, *http._mounts.values()):
            if transport is not None:  # (a mount of None: no proxy for those hosts)
                pool = transport._pool
                core = sys.modules[type(pool).__module__.partition(".")[0]]  # httpcore (httpcore2 under httpx2)
                pool._network_backend = _Backend(pool._network_backend, core)
    except (AttributeError, KeyError) as exc:
        logging.getLogger(__name__).warning("this httpx cannot be bounded (%s): no deadline or size cap", exc)
    return http


def refuse_encoded(response: Any) -> None:
    """An httpx response hook: a compressed answer (asked for none) is refused before its body is read."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise AnswerEncoded(encoding)


class _Backend:
    """A network backend whose connections (`_Stream`) keep to the current Limit."""

    def __init__(self, inner: Any, core: Any) -> None:
        self.inner, self.core = inner, core

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **options: Any) -> _Stream:
        connect = functools.partial(self.inner.connect_tcp, host, port, **options)
        return _Stream(_within(connect, timeout, self.core.ConnectTimeout), self.core)

    def connect_unix_socket(self, path: str, timeout: float | None = None, **options: Any) -> _Stream:
        connect = functools.partial(self.inner.connect_unix_socket, path, **options)
        return _Stream(_within(connect, timeout, self.core.ConnectTimeout), self.core)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _Stream:
    """One connection: each read, write and TLS handshake waits at most until the deadline; reads are counted."""

    def __init__(self, inner: Any, core: Any) -> None:
        self.inner, self.core = inner, core

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = _within(functools.partial(self.inner.read, max_bytes), timeout, self.core.ReadTimeout)
        if (limit := _LIMIT.get()) is not None:
            limit.received += len(data)
            if limit.received > limit.max_bytes:
                raise AnswerTooLarge(limit.max_bytes)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _within(functools.partial(self.inner.write, buffer), timeout, self.core.WriteTimeout)

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> _Stream:
        handshake = functools.partial(self.inner.start_tls, ssl_context, server_hostname)
        return _Stream(_within(handshake, timeout, self.core.ConnectTimeout), self.core)

    def close(self) -> None:
        self.inner.close()

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


def _within(call: Callable[[float | None], T], timeout: float | None, late: type[Exception]) -> T:
    """`call(timeout)`, the timeout cut to what is left of the current Limit (none: as given); `late` is httpcore's
    timeout of that kind (ConnectTimeout, ReadTimeout, WriteTimeout), raised at once past the deadline."""
    limit = _LIMIT.get()
    left = None if limit is None else limit.deadline - time.monotonic()
    if left is None or (timeout is not None and timeout < left):
        return call(timeout)
    if left <= 0:
        limit.expired = True
        raise late(f"no complete answer within {limit.seconds:g} s")
    try:
        return call(left)
    except late:  # the deadline, not the server's own timeout, ran out
        limit.expired = True
        raise
