"""The server's sessions: which conversation each holds, where its cache is (resident or parked), who is using it.

The registry is shared by the HTTP threads (finding or opening the session of a request) and the scheduler thread
(the only one that runs the model, parks and restores). A session in use by a request is `busy` and is neither
matched by another request nor parked.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.config import ServeConfig, ServeError
from server.messages import Said, continues


@dataclass
class Entry:
    """One session of the server."""

    id: str
    seed: int  # seed of the session's cache and sampling
    session: Any = None  # the kvstore Session while resident; None while parked or not opened yet
    parked: Any = None  # a Path (disk) or (tensors, meta) of the cache (host) while parked
    transcript: list[Said] = field(default_factory=list)  # the conversation as the client saw it
    busy: bool = False  # a request is using it
    last_used: float = field(default_factory=time.monotonic)
    history_tokens: int = 0  # tokens in its conversation, as last measured by the scheduler
    held_bytes: int = 0  # KV bytes of its cache, as last measured by the scheduler (0 while parked)
    restores: int = 0  # times it was brought back from parking

    @property
    def state(self) -> str:
        if self.parked is not None:
            return "parked"
        return "active" if self.busy else "idle"


class Registry:
    """All sessions, with the conversation-prefix matching of requests to sessions."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.entries: dict[str, Entry] = {}
        self._tmp = None if config.park_dir else tempfile.mkdtemp(prefix="nexus-serve-park-")
        self.park_dir = Path(config.park_dir or self._tmp)
        self.closed_total = 0

    def claim(self, messages: list[dict[str, str]], session_id: str | None, seed: int | None) -> tuple[Entry, int]:
        """The session a request continues (marked busy) and how many of its messages the session already has.

        An explicit `session_id` continues that session: `messages` are the whole conversation when they extend
        its transcript, else only the new messages; an unknown id opens a session under that id. Without an id,
        the idle session whose transcript `messages` extend (the longest) continues; else a new session opens.
        """
        with self.lock:
            self._expire()
            if session_id is not None:
                entry = self.entries.get(session_id) or self._open(session_id, seed)
                if entry.busy:
                    raise ServeError(f"session {session_id} is busy with another request", 409, "conflict")
                known = len(entry.transcript) if continues(entry.transcript, messages) else 0
            else:
                entry, known = self._match(messages) or (self._open(None, seed), 0)
            entry.busy, entry.last_used = True, time.monotonic()
            return entry, known

    def _match(self, messages: list[dict[str, str]]) -> tuple[Entry, int] | None:
        found = [e for e in self.entries.values() if not e.busy and e.transcript and continues(e.transcript, messages)]
        if not found:
            return None
        best = max(found, key=lambda e: len(e.transcript))
        return best, len(best.transcript)

    def _open(self, session_id: str | None, seed: int | None) -> Entry:
        if len(self.entries) >= self.config.max_sessions:
            raise ServeError(
                f"the server holds its maximum of {self.config.max_sessions} sessions; close one "
                "(DELETE /v1/sessions/<id>) or start the server with a larger --max-sessions",
                429,
                "rate_limit_error",
            )
        seed = self.config.memory.seed if seed is None else seed
        entry = Entry(id=session_id or f"sess-{uuid.uuid4().hex[:16]}", seed=seed)
        self.entries[entry.id] = entry
        return entry

    def release(self, entry: Entry, said: list[Said] | None) -> None:
        """The request is over: extend the transcript (None: the turn failed, the session is closed)."""
        with self.lock:
            entry.busy, entry.last_used = False, time.monotonic()
            if said is None:
                self._close(entry)
            else:
                entry.transcript.extend(said)

    def close(self, session_id: str) -> bool:
        """Forget an idle session (DELETE); False when there is none by that id."""
        with self.lock:
            entry = self.entries.get(session_id)
            if entry is None:
                return False
            if entry.busy:
                raise ServeError(f"session {session_id} is busy with a request", 409, "conflict")
            self._close(entry)
            return True

    def _close(self, entry: Entry) -> None:
        self.entries.pop(entry.id, None)
        if isinstance(entry.parked, Path):
            entry.parked.unlink(missing_ok=True)
        entry.session = entry.parked = None
        self.closed_total += 1

    def _expire(self) -> None:
        now = time.monotonic()
        for entry in list(self.entries.values()):
            if not entry.busy and now - entry.last_used > self.config.session_ttl_s:
                self._close(entry)

    def idle_resident(self) -> list[Entry]:
        """Idle sessions whose caches are resident, least recently used first (what parking frees)."""
        with self.lock:
            found = [e for e in self.entries.values() if not e.busy and e.session is not None]
        return sorted(found, key=lambda e: e.last_used)

    def counts(self) -> dict[str, int]:
        with self.lock:
            states = [e.state for e in self.entries.values()]
            held = sum(e.held_bytes for e in self.entries.values() if e.session is not None)
        return {s: states.count(s) for s in ("active", "idle", "parked")} | {"held_bytes": held}

    def shutdown(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
