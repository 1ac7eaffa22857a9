"""Run jobs in a local process pool: each worker process loads the model once and solves tasks one after another."""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from pipeline.executors import Job, work


def run_local(
    jobs: list[Job], workers: int, on_event: Callable[[dict[str, Any]], None]
) -> Iterator[tuple[Job, dict[str, Any]]]:
    """Yield (job, report) as jobs finish; worker events go to `on_event` meanwhile. Ctrl-C cancels the rest."""
    ctx = mp.get_context("spawn")  # a fresh interpreter per worker: no forked torch threads or live-view state
    with ctx.Manager() as manager:
        events = manager.Queue()
        pool = ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx)
        pending: dict[Future, Job] = {pool.submit(work, job, events): job for job in jobs}
        try:
            while pending:
                done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                _drain(events, on_event)
                for fut in done:
                    yield pending.pop(fut), fut.result()
        finally:
            if pending:  # interrupted (Ctrl-C, an error, the caller stopped): stop the workers now, not after a task
                _stop_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)
            _drain(events, on_event)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's processes: a task cut short leaves no report and is redone on resume."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.join(timeout=10)


def _drain(events: Any, on_event: Callable[[dict[str, Any]], None]) -> None:
    while True:
        try:
            on_event(events.get_nowait())
        except (queue.Empty, EOFError, BrokenPipeError, ConnectionError):
            return
