"""The server object: one model, the session registry, the scheduler thread and the HTTP listener (uvicorn serving
server.asgi's app, server.listen), wired together.

server = Server(model, tokenizer, ServeConfig(port=0)).start()   # or Server.load(config) by model name
... server.url ...                                              # http://127.0.0.1:PORT/v1 (https with TLS)
server.close()                                                  # drains first: close(drain=SECONDS), 0 = none
"""

from __future__ import annotations

import ssl
import threading
import time
from typing import Any

from kvstore.errors import KVStoreError
from kvstore.models.registry import load_model
from server import profiles
from server.api import ChatRequest, check_for_model
from server.asgi import build_app
from server.batching import Scheduler
from server.config import ServeConfig, ServeError, scheduler_failed
from server.drain import Drain
from server.grammars import warm_grammars
from server.jobs import Job
from server.listen import bind, make_uvicorn
from server.metrics import Metrics
from server.parking import check_park_dir, keep_across_restarts
from server.prepare import prepare
from server.sessions import Registry
from server.tls import tls_context

STOP_WAIT_S = 300.0  # how long closing waits for the listener (past the drain), then for the scheduler's last act


class Server:
    """Serves one loaded model to many sessions over the OpenAI-compatible API."""

    def __init__(
        self, model, tokenizer, config: ServeConfig, verbose: bool = False, tls: ssl.SSLContext | None = None
    ) -> None:
        """tls: the context of `config.tls_cert` when the caller loaded it already (default: loaded here)."""
        self.config, self.verbose = config, verbose
        self.started = time.time()
        self.drain = Drain(config.drain_s)  # the grace period of the shutdown for the turns in flight
        self._closing = threading.Lock()
        self.registry = Registry(config)
        self.metrics = Metrics()
        sock = None
        try:  # every way out before the server exists frees the port and the park folder's lock (another start may)
            self.scheduler = Scheduler(model, tokenizer, config, self.registry, self.metrics)
            keep_across_restarts(self.registry, self.scheduler)  # --park-dir: lock it, adopt its sessions, park at stop
            self.scheduler.on_death.append(self._scheduler_died)
            warm_grammars(tokenizer)  # before any stream runs
            sock = self.socket = bind(config)
            self._port = sock.getsockname()[1]  # known while the socket is open or closed
            context = tls if tls is not None else tls_context(config)
            self.http = make_uvicorn(build_app(self), config, context, self._shut_down, self.drain.cut, verbose)
        except BaseException:
            if sock is not None:
                sock.close()
            self.registry.shutdown()
            raise
        self._thread: threading.Thread | None = None

    @classmethod
    def load(cls, config: ServeConfig, verbose: bool = False) -> Server:
        """Load `config.memory.model` through kvstore's registry and build the server on it."""

        tls = tls_context(config)  # a bad certificate is one line of error before the model loads
        if config.park_dir is not None:
            check_park_dir(config.park_dir)  # so is a park folder another server holds
        model, tokenizer, _ = load_model(config.memory.model, device=config.memory.device, dtype=config.dtype)
        return cls(model, tokenizer, config, verbose, tls)

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """The base URL clients use (OpenAI's base_url)."""
        scheme = "http" if self.config.tls_cert is None else "https"
        return f"{scheme}://{self.config.host}:{self.port}/v1"

    def start(self) -> Server:
        """Start the scheduler and serve HTTP in a background thread (the socket listens already)."""
        self.scheduler.start()
        self._thread = threading.Thread(target=self._serve, name="nexus-http", daemon=True)
        self._thread.start()
        end = time.monotonic() + STOP_WAIT_S
        while not self.http.started and self._thread.is_alive() and time.monotonic() < end:
            time.sleep(0.01)
        if not self.http.started:
            self.close()
            raise ServeError(f"the HTTP listener on {self.config.host}:{self.port} did not start")
        return self

    def serve_forever(self) -> None:
        """Start the scheduler and serve HTTP in this thread until SIGTERM or SIGINT, then shut down gracefully:
        accept no more, let the turns in flight finish for up to `config.drain_s` seconds (a second signal: at once),
        end those still running (streams with an error event), stop the scheduler, park the idle sessions. When the
        scheduler died, the same shutdown, then a ServeError naming its failure (the CLI exits with status 2, so a
        process manager restarts it; the next start adopts the parked sessions)."""
        self.scheduler.start()
        try:
            self._serve()
        finally:
            self.close()
        if self.scheduler.failure is not None:
            raise scheduler_failed(self.scheduler.failure)

    def _serve(self) -> None:
        self.http.run(sockets=[self.socket])

    def close(self, drain: float | None = None) -> None:
        """Shut down as on SIGTERM: accept no more, let the turns in flight finish for up to `drain` seconds (default
        `config.drain_s`; 0: end them at once), then end the rest and stop. Idempotent; called again while a close
        drains (from another thread), a shorter `drain` ends the drain sooner (0: now, as a second SIGTERM does) and
        the call returns once the server is closed."""
        seconds = self.config.drain_s if drain is None else max(0.0, drain)
        self.drain.ask(seconds)
        with self._closing:
            try:
                if self._thread is not None:
                    self.http.should_exit = True
                    self._thread.join(seconds + STOP_WAIT_S)
                    self._thread = None
                self.socket.close()
                self._stop_scheduler()
            finally:
                self.registry.shutdown()  # the park folder's lock goes on every way out

    def _scheduler_died(self) -> None:
        """The scheduler's on_death (on its thread, its sessions parked): the listener shuts down as on SIGTERM."""
        self.http.should_exit = True

    def _shut_down(self) -> None:
        """uvicorn's on_shutdown, once the listener is closed: the drain (no new work; the turns in flight finish,
        for up to its grace period), then the scheduler stops."""
        try:
            self.drain.run(self.scheduler)
        finally:
            self._stop_scheduler()

    def _stop_scheduler(self) -> None:
        """Stop the scheduler after its current step and wait for its last act: every reply still in flight ends
        with an error, then its on_stop hooks run (parking the sessions) before the park folder may go."""
        self.scheduler.stop()
        if self.scheduler.is_alive():
            self.scheduler.join(STOP_WAIT_S)

    def submit(self, req: ChatRequest, events=None) -> Job:
        """Compile the request's grammar (api.check_for_model), find or open its session, tokenize its new messages
        (server.prepare), all on the caller's thread, not the scheduler's, and queue its turn (ServeError: refused,
        e.g. too many sessions, too long). `events`: where the scheduler puts the job's events (default: a
        queue.Queue)."""
        if self.scheduler.stopping:  # the drain of a shutdown, or after it, or the scheduler died
            raise self.scheduler.refusal()
        constraint = check_for_model(req, self.scheduler.tokenizer)  # a grammar compiles here, not on the scheduler
        entry, known = self.registry.claim(req.messages, req.session_id, req.seed, req.owner)
        messages = req.messages[known:]
        try:
            prepared = prepare(self.scheduler.reference, messages, first=not entry.transcript)
        except (ServeError, KVStoreError) as exc:
            self.registry.release(entry, [] if entry.transcript else None)  # a new session goes, a known one stays
            raise exc if isinstance(exc, ServeError) else ServeError(str(exc)) from None
        job = Job(
            entry=entry, messages=messages, max_new_tokens=req.max_new_tokens, temperature=req.temperature,
            top_p=req.top_p, stop=req.stop, continued=bool(entry.transcript), prepared=prepared, request=req,
            constraint=constraint, **({} if events is None else {"events": events}),
        )  # fmt: skip
        try:
            self.scheduler.submit(job)
        except ServeError:  # the shutdown began while it was prepared: refused, its session as it was
            self.registry.release(entry, [] if entry.transcript else None)
            raise
        return job

    def profiles(self, body: object) -> dict[str, Any]:
        """POST /v1/nexus/profiles (server.profiles): calibrate a memory profile on the served model from the
        conversations sent, or install one sent; either is saved where new sessions read their profiles."""

        profiles.profile_dir(self.config)  # refused before any work
        kind, request = profiles.parse(body, self.config.max_profile_conversations)
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
