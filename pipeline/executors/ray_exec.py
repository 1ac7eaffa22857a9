"""Run jobs as Ray tasks (a local Ray instance, or a cluster at --ray-address), one CPU each.

Workers must be able to import nexus-agent (install it on every node); task folders must be on storage the
driver can read (a shared filesystem on a real cluster). Events come back through a Ray queue actor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pipeline.executors import Job, work


def run_ray(
    jobs: list[Job], address: str | None, workers: int, on_event: Callable[[dict[str, Any]], None]
) -> Iterator[tuple[Job, dict[str, Any]]]:
    """Yield (job, report) as Ray tasks finish; at most `workers` run at once. Ctrl-C cancels the rest."""
    import ray  # lazy: ray is optional
    from ray.util.queue import Empty, Queue  # lazy: ray is optional

    started_here = not ray.is_initialized()
    if started_here:
        kwargs = {"address": address} if address else {"num_cpus": max(1, workers)}
        ray.init(**kwargs, include_dashboard=False, log_to_driver=False, configure_logging=False)
    events = Queue()
    remote = ray.remote(num_cpus=1, max_retries=0)(work)
    refs = {remote.remote(job, events): job for job in jobs}
    try:
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1, timeout=0.25)
            _drain(events, Empty, on_event)
            for ref in done:
                yield refs.pop(ref), ray.get(ref)
    finally:
        for ref in refs:
            ray.cancel(ref, force=True)
        _drain(events, Empty, on_event)
        if started_here:
            ray.shutdown()


def _drain(events: Any, empty: type[Exception], on_event: Callable[[dict[str, Any]], None]) -> None:
    while True:
        try:
            on_event(events.get_nowait())
        except empty:
            return
