"""The server object: one model, the session registry, the scheduler thread and the HTTP listener, wired together.

server = Server(model, tokenizer, ServeConfig(port=0)).start()   # or Server.load(config) by model name
... server.url ...                                              # http://127.0.0.1:PORT/v1 (https with TLS)
server.close()
"""

from __future__ import annotations

import ssl
import threading
import time
from typing import Any

from server.api import ChatRequest
from server.batching import Job, Scheduler
from server.config import ServeConfig
from server.http import make_http_server
from server.metrics import Metrics
from server.sessions import Registry
from server.tls import tls_context


class Server:
    """Serves one loaded model to many sessions over the OpenAI-compatible API."""

    def __init__(
        self, model, tokenizer, config: ServeConfig, verbose: bool = False, tls: ssl.SSLContext | None = None
    ) -> None:
        """tls: the context of `config.tls_cert` when the caller loaded it already (default: loaded here)."""
        self.config, self.verbose = config, verbose
        self.started = time.time()
        self.registry = Registry(config)
        self.metrics = Metrics()
        self.scheduler = Scheduler(model, tokenizer, config, self.registry, self.metrics)
        self.httpd = make_http_server(self, tls if tls is not None else tls_context(config))
        self._thread: threading.Thread | None = None

    @classmethod
    def load(cls, config: ServeConfig, verbose: bool = False) -> Server:
        """Load `config.memory.model` through kvstore's registry and build the server on it."""
        from kvstore.models.registry import load_model

        tls = tls_context(config)  # a bad certificate is one line of error before the model loads
        model, tokenizer, _ = load_model(config.memory.model, device=config.memory.device, dtype=config.dtype)
        return cls(model, tokenizer, config, verbose, tls)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        """The base URL clients use (OpenAI's base_url)."""
        scheme = "http" if self.config.tls_cert is None else "https"
        return f"{scheme}://{self.config.host}:{self.port}/v1"

    def start(self) -> Server:
        """Start the scheduler and serve HTTP in a background thread."""
        self.scheduler.start()
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="nexus-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Start the scheduler and serve HTTP in this thread until interrupted."""
        self.scheduler.start()
        try:
            self.httpd.serve_forever()
        finally:
            self.close()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread = None
        self.httpd.server_close()
        self.scheduler.stop()
        self.registry.shutdown()

    def submit(self, req: ChatRequest) -> Job:
        """Find or open the request's session and queue its turn (ServeError: refused, e.g. too many sessions)."""
        entry, known = self.registry.claim(req.messages, req.session_id, req.seed)
        job = Job(
            entry=entry, messages=req.messages[known:], max_new_tokens=req.max_new_tokens,
            temperature=req.temperature, top_p=req.top_p, stop=req.stop, continued=bool(entry.transcript),
        )  # fmt: skip
        self.scheduler.submit(job)
        return job

    def profiles(self, body: object) -> dict[str, Any]:
        """POST /v1/nexus/profiles (server.profiles): calibrate a memory profile on the served model from the
        conversations sent, or install one sent; either is saved where new sessions read their profiles."""
        from server import profiles

        profiles.profile_dir(self.config)  # refused before any work
        kind, request = profiles.parse(body)
        if kind == "install":
            return self.scheduler.call(lambda model, _tok: profiles.install(model, self.config, request))
        room = self.scheduler.room_for_full_cache

        def run(model, tok):  # a generator: the scheduler runs it one replayed message per loop
            return profiles.calibrate(model, tok, self.config, request, lambda n: room(n, "this calibration"))

        return self.scheduler.call(run)

    def metrics_text(self) -> str:
        return self.metrics.render(self.registry.counts(), self.config.memory_cap, self.scheduler.queued)

    def sessions_info(self) -> list[dict[str, Any]]:
        with self.registry.lock:
            entries = list(self.registry.entries.values())
        return [
            {"id": e.id, "object": "session", "state": e.state, "messages": len(e.transcript),
             "history_tokens": e.history_tokens, "held_bytes": e.held_bytes, "restores": e.restores}
            for e in entries
        ]  # fmt: skip
