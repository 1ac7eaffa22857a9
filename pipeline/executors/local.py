"""Run jobs in a local process pool: each worker process loads the model once and solves tasks one after another."""

from __future__ import annotations

import multiprocessing as mp
import queue
import shutil
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing.managers import SyncManager
from typing import Any

from pipeline.executors import Job, work
from pipeline.lifetime import ctrl_c_held, start_worker
from swe_env.sandbox.owners import make_owned_dir


def run_local(
    jobs: list[Job], workers: int, on_event: Callable[[dict[str, Any]], None]
) -> Iterator[tuple[Job, dict[str, Any]]]:
    """Yield (job, report) as jobs finish; worker events go to `on_event` meanwhile. Ctrl-C cancels the rest."""
    ctx = mp.get_context("spawn")  # a fresh interpreter per worker: no forked torch threads or live-view state
    tmp = make_owned_dir("run")  # the workers' temp files; reclaimed by the next start-up sweep after a SIGKILL
    try:
        yield from _run(jobs, workers, on_event, ctx, str(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(jobs, workers, on_event, ctx, tmp: str) -> Iterator[tuple[Job, dict[str, Any]]]:
    # an abstract socket: no path (a long TMPDIR would exceed AF_UNIX's 108 bytes), nothing left on disk
    manager = SyncManager(address=f"\0nexus-manager-{uuid.uuid4().hex}", ctx=ctx)
    # Ctrl-C waits while the manager and the workers start (held: they printed the tracebacks of a parent gone
    # mid-handshake); they die with this process, even on SIGKILL.
    with ctrl_c_held():
        manager.start(start_worker, (tmp,))
        events = manager.Queue()
    with manager:
        pool = ProcessPoolExecutor(max(1, workers), mp_context=ctx, initializer=start_worker, initargs=(tmp,))
        pending: dict[Future, Job] = {}
        try:
            with ctrl_c_held():
                pending.update({pool.submit(work, job, events): job for job in jobs})
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
