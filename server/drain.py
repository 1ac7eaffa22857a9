"""The drain of a shutdown (`serve --drain SECONDS`, `Server.close(drain=...)`): once the listener is closed, the
scheduler takes no new work (a request gets HTTP 503 with Retry-After), but the turns it had already accepted, those
decoding and those still queued for a batch slot or memory, run on for up to the grace period, so that a restart
does not cut replies that were about to end. Their clients get them whole and their sessions, idle again, are parked
with the others (`--park-dir`). What is still in flight when the grace period ends, or at once on a second SIGTERM /
Ctrl-C (or a `Server.close(drain=0)` from another thread), ends as a shutdown without a drain does: a stream with the
`server_shutdown` error event, a plain request with HTTP 503, its session closed. The scheduler is then stopped by
the caller (server.app).
"""

from __future__ import annotations

import threading
import time

from server.parking import log

POLL_S = 0.05  # how often the drain looks whether the work in flight is over


class Drain:
    """The grace period of one server's shutdown, and what ends it early."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds  # the grace period (config.drain_s, or what close(drain=...) asked first)
        self._asked = False
        self._end: float | None = None  # while draining: when the grace period ends
        self._cut = threading.Event()  # end the drain now
        self._over = False  # the drain is over (or never ran): a further signal is no longer about it
        self._lock = threading.Lock()

    def ask(self, seconds: float) -> None:
        """A close asking for a drain of `seconds`: before the drain began, the first one sets its length; during
        it, a shorter one moves its end nearer (0: ends it now)."""
        with self._lock:
            now = time.monotonic()
            if self._end is not None:
                self._end = min(self._end, now + seconds)
            elif not self._asked:
                self.seconds, self._asked = seconds, True
            else:
                self.seconds = min(self.seconds, seconds)
            if seconds <= 0:
                self._cut.set()

    def cut(self) -> bool:
        """A second SIGTERM / Ctrl-C: end the drain now. False once the drain is over (the signal then does what
        uvicorn does with it)."""
        if self._over:  # no lock: this runs in a signal handler, on the thread that may hold it
            return False
        self._cut.set()
        return True

    def run(self, scheduler) -> None:
        """On shutdown, with the listener closed: refuse new work, then wait for the work in flight to end, at most
        the grace period (a line on stderr when it starts, only when there is some, and one when it ends)."""
        with self._lock:  # its end is known before any request can see the intake closed
            start = time.monotonic()
            seconds = max(0.0, self.seconds)
            self._end = start + seconds
        scheduler.close_intake()
        try:
            what = _in_flight(scheduler)
            if what is None or seconds <= 0:
                return
            if not self._cut.is_set():
                log(f"draining {what} in flight (up to {seconds:g} s; Ctrl-C or SIGTERM again to stop now)")
            while scheduler.is_alive() and not self._cut.is_set():
                with self._lock:
                    end = self._end
                if time.monotonic() >= end or _in_flight(scheduler) is None:
                    break
                self._cut.wait(POLL_S)
            left = _in_flight(scheduler) if scheduler.is_alive() else None
            took = time.monotonic() - start
            if left is None:
                log(f"drained in {took:.1f} s: every turn in flight finished")
            elif self._cut.is_set():
                log(f"asked again to stop: ending the drain after {took:.1f} s, cutting {left} in flight")
            else:
                log(f"the drain's {seconds:g} s are over: cutting {left} still in flight")
        finally:
            with self._lock:
                self._over = True


def _in_flight(scheduler) -> str | None:
    """The work in flight in words ("2 turns", "1 turn and 1 profile calibration"), None when there is none."""
    turns, calls = scheduler.in_flight, scheduler.calls.in_flight
    parts = [f"{n} {word}{'' if n == 1 else 's'}" for n, word in ((turns, "turn"), (calls, "profile calibration")) if n]
    return " and ".join(parts) or None
