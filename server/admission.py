"""Which session gives up its resident slot when a turn needs one: the rule that keeps admission from deadlocking.

`max_sessions` caches may be on the model's device at once. A slot is held by a session whose cache is there
(`Entry.session` set), not by a request still queued for a session that has none yet (a newcomer, or a parked
session coming back): counting those made a newcomer wait for slots that the sessions queued *behind* it held, a
deadlock until the queue timeout (issue 61: 8 slots, 16 multi-turn clients, no token for minutes).

The turn at the head of the queue (FIFO, so every turn is served in its order of arrival) that needs a slot, when
none is free, parks to disk:

1. the least recently used *idle* session (no request of its client in flight), else
2. a session whose next turn is queued behind it (its cache sits unused until that turn starts, and that turn
   arrived later: it gets a slot back, the same way, when its own turn comes), the latest arrival first.

Only when every resident session is decoding or prefilling does the turn wait, and one of them ends within its
`max_tokens`. So no request is refused for want of a slot (no 429): it waits at most `--queue-timeout` (then 503).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from server.config import ServeError
from server.jobs import Job
from server.parking import park
from server.sessions import Entry, Registry


def victim_for(registry: Registry, job: Job, waiting: Sequence[Job]) -> tuple[bool, Entry | None]:
    """(True, None) when `job`'s session holds a slot or one is free; (True, victim) when `victim` must be parked
    first; (False, None) when every resident session is decoding (the job waits)."""
    queued_after = {id(j.entry): j.submitted for j in waiting if j is not job and j.submitted >= job.submitted}
    with registry.lock:
        resident = [e for e in registry.entries.values() if e.session is not None and e is not job.entry]
        if job.entry.session is not None or len(resident) < registry.config.max_sessions:
            return True, None
        idle = sorted((e for e in resident if not e.busy), key=lambda e: e.last_used)
        if idle:
            return True, idle[0]
        later = sorted((e for e in resident if id(e) in queued_after), key=lambda e: -queued_after[id(e)])
    return (True, later[0]) if later else (False, None)


def take_slot(registry: Registry, job: Job, waiting: Sequence[Job], metrics, lost: Callable[[Job], None]) -> bool:
    """Make a resident slot for `job`'s session by parking (victim_for); False when it must wait. A queued session
    whose park failed (its file could not be written) has lost its cache: its queued turn gets `lost`."""
    while True:
        free, victim = victim_for(registry, job, waiting)
        if victim is None:
            return free
        if park(victim, "disk", registry):
            metrics.add("sessions_parked_total")
        elif victim.busy:
            for other in [j for j in waiting if j.entry is victim]:
                lost(other)


def session_lost(entry: Entry) -> ServeError:
    """What a queued turn gets when its session could not be parked to make room (the session is closed)."""
    return ServeError(
        f"session {entry.id} could not be parked to make room for another and is closed: send the whole "
        "conversation again to open a new one", 503, "session_lost",
    )  # fmt: skip
