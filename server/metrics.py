"""Server counters and the Prometheus text exposition of /metrics (sessions, held KV bytes, tokens/s, batches)."""

from __future__ import annotations

import collections
import threading
import time

WINDOW_S = 10.0  # tokens/s is measured over this many recent seconds


class Metrics:
    """Counters the scheduler and the HTTP threads update; `render` reads them with the registry's counts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counters: dict[str, float] = collections.defaultdict(float)
        self.requests: dict[int, int] = collections.defaultdict(int)
        self.failures: dict[str, int] = collections.defaultdict(int)  # requests answered with an error, by cause
        self._recent: collections.deque[tuple[float, int]] = collections.deque()  # (time, tokens generated)
        self.last_batch = 0

    def add(self, name: str, value: float = 1.0) -> None:
        with self.lock:
            self.counters[name] += value

    def request(self, status: int, cause: str | None = None) -> None:
        """A chat request's answer (`cause`: what failed, for an error: ServeError.cause)."""
        with self.lock:
            self.requests[status] += 1
            if status >= 400 and cause:
                self.failures[cause] += 1

    def failed(self, cause: str) -> None:
        """A request that failed after its 200 (a stream's error event)."""
        with self.lock:
            self.failures[cause] += 1

    def decoded(self, tokens: int, batch: int) -> None:
        """One decode step produced `tokens` tokens for `batch` sessions."""
        now = time.monotonic()
        with self.lock:
            self.counters["tokens_generated_total"] += tokens
            self.counters["decode_steps_total"] += 1
            self.counters["decode_rows_total"] += batch
            self.last_batch = batch
            self._recent.append((now, tokens))
            while self._recent and now - self._recent[0][0] > WINDOW_S:
                self._recent.popleft()

    def tokens_per_s(self) -> float:
        now = time.monotonic()
        with self.lock:
            n = sum(t for when, t in self._recent if now - when <= WINDOW_S)
        return n / WINDOW_S

    def render(self, counts: dict[str, int], cap: int | None, queued: int) -> str:
        """The Prometheus text format (version 0.0.4)."""
        lines = [
            "# HELP nexus_sessions Sessions the server keeps, by state (active: serving a request).",
            "# TYPE nexus_sessions gauge",
            *(f'nexus_sessions{{state="{s}"}} {counts[s]}' for s in ("active", "idle", "parked")),
            *_gauge("nexus_kv_bytes_held", "KV bytes held by resident sessions.", counts["held_bytes"]),
            *_gauge("nexus_kv_bytes_cap", "The KV memory cap (-1: none).", -1 if cap is None else cap),
            *_gauge("nexus_queue_depth", "Requests waiting for KV memory or a batch slot.", queued),
            *_gauge("nexus_batch_size", "Sessions in the last decode step.", self.last_batch),
            *_gauge("nexus_decode_tokens_per_second", f"Tokens generated per second (last {WINDOW_S:.0f} s).",
                    round(self.tokens_per_s(), 3)),
        ]  # fmt: skip
        with self.lock:
            counters = dict(self.counters)
            requests, failures = dict(self.requests), dict(self.failures)
        for name in sorted(counters):
            lines += [f"# TYPE nexus_{name} counter", f"nexus_{name} {counters[name]:g}"]
        lines += ["# HELP nexus_requests_total Chat-completion requests by HTTP status."]
        lines += ["# TYPE nexus_requests_total counter"]
        lines += [f'nexus_requests_total{{code="{c}"}} {n}' for c, n in sorted(requests.items())]
        lines += ["# HELP nexus_requests_failed_total Requests answered with an error (streams: an error event), by"
                  " cause.", "# TYPE nexus_requests_failed_total counter"]  # fmt: skip
        lines += [f'nexus_requests_failed_total{{cause="{c}"}} {n}' for c, n in sorted(failures.items())]
        return "\n".join(lines) + "\n"


def _gauge(name: str, help_: str, value: float) -> list[str]:
    return [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name} {value}"]
