"""A closed or parked session releases its memory at once, not at the next garbage collection (no reference cycle
holds its cache or its session), an idle session keeps no logits, and the idle scheduler returns freed host memory
to the system (server.heap)."""

from __future__ import annotations

import gc
import weakref

import pytest
from sessionlib import words

from benchmarks.serve_client import stream_chat
from server import heap

KIB = 1024


@pytest.mark.parametrize("park", ["disk", "host"])
def test_a_parked_or_closed_session_frees_its_cache_without_a_collection(make_server, park: str) -> None:
    server = make_server(memory_cap=280 * KIB, park=park)  # two 300-word turns do not fit: the idle one is parked
    stream_chat(server.url, [{"role": "user", "content": words(300, "a")}], 8)
    (entry,) = server.registry.entries.values()
    assert entry.session.logits is None  # its next turn prefills first: the [V] logits are not kept
    session, cache = weakref.ref(entry.session), weakref.ref(entry.session.cache)
    gc.collect()
    gc.disable()  # what is freed below is freed by reference counting alone
    try:
        stream_chat(server.url, [{"role": "user", "content": words(300, "b")}], 8)
        assert entry.state == "parked" and cache() is None
        for sid in list(server.registry.entries):
            server.registry.close(sid)
        assert session() is None and not server.registry.entries
    finally:
        gc.enable()


def test_idle_trim_runs_once_per_change_and_at_most_once_per_period() -> None:
    if heap._malloc_trim() is None:
        pytest.skip("no glibc malloc_trim on this system")
    trim = heap.IdleTrim(every_s=0.0)
    assert trim((1, 0, 0)) and not trim((1, 0, 0)) and trim((2, 0, 0))  # nothing freed since: no trim
    slow = heap.IdleTrim(every_s=3600.0)
    assert slow((1, 0, 0)) and not slow((2, 0, 0))
