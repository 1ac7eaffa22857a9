"""Work other than chat turns that must use the model, run on the scheduler thread (the model is that thread's alone):
installing or calibrating a memory profile (server.profiles).

An HTTP thread hands `fn(model, tokenizer)` over and waits. A plain function runs whole between two scheduler loops.
A generator function runs one step (up to its next `yield`) per scheduler loop, so the other sessions' prefill
chunks and decode steps go on in between: a calibration yields after each message it replays, instead of stalling
every session for all of its conversations. Its `return` value is the answer; an exception is raised in the caller.
While a step runs, `current` is its call, so that the work can hold KV memory under the cap for its whole length
(Scheduler.room_for_full_cache sets `reserved`).

While sessions have work (a turn decoding or prefilling), the calls' steps take at most CALL_SHARE of the
scheduler's time: after steps that took d seconds, the next ones wait d x (1 - CALL_SHARE) / CALL_SHARE seconds, in
which the sessions decode. A calibration step (a message's prefill chunk on a full cache) takes many decode steps'
time, so without it a calibration slowed every reply to about a tenth of its speed for its whole length; with
nothing else to do, calls run at full speed.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from inspect import isgenerator
from typing import Any

import torch

from server.config import ServeError

CALL_SHARE = 0.25  # most of the scheduler's time the calls' steps take while sessions have work


@dataclass
class Call:
    fn: Callable[[Any, Any], Any]
    done: queue.Queue = field(default_factory=queue.Queue)  # (True, result) or (False, exception)
    steps: Iterator | None = None  # the running generator, after its first step
    reserved: int = 0  # KV bytes set aside for it until it ends


class Calls:
    def __init__(self) -> None:
        self.pending: queue.Queue[Call] = queue.Queue()
        self.running: list[Call] = []  # generators between two steps
        self.current: Call | None = None  # the call whose step runs now
        self.in_flight = 0  # calls handed over and not yet answered (a shutdown's drain waits for them)
        self._count = threading.Lock()
        self._rest_until = 0.0  # monotonic time before which, while sessions have work, no step runs

    def wait(self, fn: Callable[[Any, Any], Any], wake: Callable[[], None], alive: Callable[[], bool]) -> Any:
        """On an HTTP thread: queue `fn`, wake the scheduler, and wait for the result (ServeError 503 when the
        scheduler stops first)."""
        call = Call(fn)
        with self._count:
            self.in_flight += 1
        try:
            self.pending.put(call)
            wake()
            while True:
                try:
                    ok, value = call.done.get(timeout=1.0)
                    break
                except queue.Empty:
                    if not alive():
                        raise ServeError("the server is shutting down", 503, "server_busy") from None
        finally:
            with self._count:
                self.in_flight -= 1
        if not ok:
            raise value
        return value

    @property
    def busy(self) -> bool:
        return bool(self.running) or not self.pending.empty()

    @property
    def reserved(self) -> int:
        return sum(c.reserved for c in self.running) + (self.current.reserved if self.current else 0)

    def run(self, model, tokenizer, contended: bool = False) -> None:
        """On the scheduler thread, once per loop: start every new call, then one step of each running one; while
        sessions have work (`contended`), only once the rest after the last steps is over (CALL_SHARE)."""
        if contended and time.monotonic() < self._rest_until:
            return
        start = time.monotonic()
        self._step_all(model, tokenizer)
        end = time.monotonic()
        self._rest_until = end + (end - start) * (1 - CALL_SHARE) / CALL_SHARE

    def _step_all(self, model, tokenizer) -> None:
        ongoing = list(self.running)  # a call started now has had its step
        while True:
            try:
                call = self.pending.get_nowait()
            except queue.Empty:
                break
            self._guarded(call, lambda c=call: self._started(c, c.fn(model, tokenizer)))
        for call in ongoing:
            self.running.remove(call)
            self._guarded(call, lambda c=call: self._advance(c))

    def _started(self, call: Call, value: Any) -> None:
        if not isgenerator(value):
            call.done.put((True, value))
            return
        call.steps = value
        self._advance(call)

    def _advance(self, call: Call) -> None:
        try:
            next(call.steps)
        except StopIteration as stop:
            call.done.put((True, stop.value))
            return
        self.running.append(call)

    def _guarded(self, call: Call, work: Callable[[], None]) -> None:

        self.current = call
        try:
            with torch.inference_mode():
                work()
        except Exception as exc:  # noqa: BLE001 - handed to the caller; the scheduler goes on
            call.done.put((False, exc))
        finally:
            self.current = None
