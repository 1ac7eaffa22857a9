"""The admission rule (server.admission.victim_for) on a real registry: which resident session a turn that needs a
slot parks, and when it waits. Entries hold a stand-in object as their cache (the rule only asks whether one is on
the device); the scheduler's behaviour with real sessions is tests/server/test_fair_admission.py's."""

from __future__ import annotations

import tempfile
import time

import pytest
from sessionlib import serve_config

from server.admission import victim_for
from server.jobs import Job
from server.sessions import Entry, Registry


@pytest.fixture(autouse=True)
def park_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the registries' temporary park folders go there


def setup(*states: str) -> tuple[Registry, dict[str, Entry]]:
    """A registry of max_sessions = len(states) resident sessions: "idle", "active" (decoding) or "queued"."""
    registry = Registry(serve_config(port=0, model="tiny-qwen3", max_sessions=len(states)))
    entries = {}
    for i, state in enumerate(states):
        entry = Entry(id=f"{state}-{i}", seed=0, session=object(), busy=state != "idle", last_used=time.monotonic())
        registry.adopt(entry)
        entries[entry.id] = entry
    return registry, entries


def job(entry: Entry) -> Job:
    return Job(entry=entry, messages=[], max_new_tokens=1, temperature=0.0, top_p=1.0, stop=(), continued=False)


def test_a_newcomer_parks_the_least_recently_used_idle_session_first() -> None:
    registry, e = setup("queued", "idle", "idle")
    newcomer = job(Entry(id="new", seed=0))
    waiting = [job(e["queued-0"])]  # queued after the newcomer
    assert victim_for(registry, newcomer, waiting) == (True, e["idle-1"])


def test_without_an_idle_session_it_parks_the_latest_queued_one_never_a_decoding_one() -> None:
    registry, e = setup("active", "queued", "queued")
    newcomer = job(Entry(id="new", seed=0))
    waiting = [job(e["queued-1"]), job(e["queued-2"])]
    assert victim_for(registry, newcomer, waiting) == (True, e["queued-2"])
    earlier = job(e["queued-1"])
    newcomer.submitted = earlier.submitted + 1  # a turn queued before the newcomer keeps its slot
    assert victim_for(registry, newcomer, [earlier]) == (False, None)


def test_it_waits_only_while_every_resident_session_decodes() -> None:
    registry, e = setup("active", "active")
    assert victim_for(registry, job(Entry(id="new", seed=0)), []) == (False, None)
    assert victim_for(registry, job(e["active-0"]), []) == (True, None)  # its own cache holds its slot


def test_a_session_not_opened_yet_holds_no_slot() -> None:
    registry, e = setup("active", "active")
    e["active-1"].session = None  # a request queued for a session with no cache yet
    assert victim_for(registry, job(Entry(id="new", seed=0)), []) == (True, None)
