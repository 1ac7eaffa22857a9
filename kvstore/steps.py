"""Step generators: work split into steps that yield between them, so that a driver (a server's scheduler) can run
other work in between; `run_steps` runs one to its end for callers that do not interleave."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

T = TypeVar("T")


def run_steps(steps: Generator[Any, None, T]) -> T:
    """Run a step generator (kvstore.cache.forwarding.prefill_steps, kvstore.session.teacher.replay_steps,
    kvstore.profiles.calibrate.calibration_steps, ...) to its end; what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value
