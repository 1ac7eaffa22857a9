"""The server's own errors: what cannot start as configured, and what a request gets back as an HTTP error.

Not kvstore errors: a kvstore error raised while serving a request is turned into one of these where the request's
data caused it (server.config.request_failed), so that the server, not the cache, decides each status code."""

from __future__ import annotations

from kvstore.errors import NamesSetting


class ServeError(Exception):
    """The server cannot start as asked (a bad setting) or a request cannot be served (an HTTP error with a message).

    status: the HTTP status of the answer; kind: its error type (OpenAI's `type`); cause: what failed, for the
    metrics of failed requests (default: `kind`)."""

    def __init__(
        self, message: str, status: int = 400, kind: str = "invalid_request_error", cause: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.cause = status, kind, cause or kind


class ServeSettingError(NamesSetting, ServeError):
    """A setting of the server (a ServeConfig field) holds a value it cannot start with: "drain_s must be ...", on
    the command line "--drain must be ..." (kvstore.errors.NamesSetting). Its answer, were it one, is a 400."""
