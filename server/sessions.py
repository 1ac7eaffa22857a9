"""The server's sessions: which conversation each holds, where its cache is (resident or parked), who is using it.

The registry is shared by the HTTP threads (finding or opening the session of a request) and the scheduler thread
(the only one that runs the model, parks and restores). A session in use by a request is `busy` and is neither
matched by another request nor parked while it decodes. `max_sessions` bounds the *resident* sessions (their caches
on the model's device): when it is reached, the scheduler parks one to disk before another comes in (server.admission
says which; a request waits for a slot, it is never refused for want of one). Parked sessions, on disk
or in host memory (`--park host`), are bounded together by `park_quota` (bytes of their session files and host
tensors): past it, the least recently used are closed.
"""

from __future__ import annotations

import hashlib
import os
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
    named: bool = False  # opened under a client's explicit id: only that id continues it, never a prefix match
    owner: str = ""  # the client that opened it (owner_of): only its requests continue it by a prefix match
    session: Any = None  # the kvstore Session while resident; None while parked or not opened yet
    parked: Any = None  # a Path (disk) or (session, tensors, meta) of the cache (host) while parked
    transcript: list[Said] = field(default_factory=list)  # the conversation as the client saw it
    busy: bool = False  # a request is using it
    last_used: float = field(default_factory=time.monotonic)
    history_tokens: int = 0  # tokens in its conversation, as last measured by the scheduler
    held_bytes: int = 0  # KV bytes of its cache, as last measured by the scheduler (0 while parked)
    parked_bytes: int = 0  # bytes of its files in the park folder, or of its tensors in host memory, while parked
    restores: int = 0  # times it was brought back from parking

    @property
    def state(self) -> str:
        if self.parked is not None:
            return "parked"
        return "active" if self.busy else "idle"

    @property
    def on_disk(self) -> bool:
        return isinstance(self.parked, Path)


class Registry:
    """All sessions, with the conversation-prefix matching of requests to sessions."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.entries: dict[str, Entry] = {}
        self._tmp = None if config.park_dir else tempfile.mkdtemp(prefix="nexus-serve-park-")
        self.park_dir = Path(config.park_dir or self._tmp)
        self.persistent = config.park_dir is not None  # sessions are parked there at shutdown and adopted at start
        self.park_lock: int | None = None  # the park folder's lock (server.parking.hold_park_dir), held while serving
        self.closed_total = 0

    def claim(
        self, messages: list[dict[str, str]], session_id: str | None, seed: int | None, owner: str = ""
    ) -> tuple[Entry, int]:
        """The session a request continues (marked busy) and how many of its messages the session already has.

        An explicit `session_id` continues that session: `messages` are the whole conversation when they extend
        its transcript, else only the new messages; an unknown id opens a session under that id. Without an id,
        the idle session of the same `owner` (owner_of) whose transcript `messages` extend (the longest, the
        earliest opened among equals; never one opened under an explicit id) continues; else a new session opens.
        """
        with self.lock:
            self._expire()
            if session_id is not None:
                entry = self.entries.get(session_id) or self._open(session_id, seed)
                if entry.busy:
                    raise ServeError(f"session {session_id} is busy with another request", 409, "conflict")
                known = len(entry.transcript) if continues(entry.transcript, messages) else 0
            else:
                matched = self._match(messages, owner)
                entry, known = matched or (self._open(None, seed, owner), 0)
            entry.busy, entry.last_used = True, time.monotonic()
            return entry, known

    def _match(self, messages: list[dict[str, str]], owner: str) -> tuple[Entry, int] | None:
        found = [
            e
            for e in self.entries.values()
            if not e.busy and not e.named and e.owner == owner and e.transcript and continues(e.transcript, messages)
        ]
        if not found:
            return None
        best = max(found, key=lambda e: len(e.transcript))
        return best, len(best.transcript)

    def _open(self, session_id: str | None, seed: int | None, owner: str = "") -> Entry:
        seed = self.config.memory.seed if seed is None else seed
        entry = Entry(
            id=session_id or f"sess-{uuid.uuid4().hex[:16]}", seed=seed, named=session_id is not None, owner=owner
        )
        self.entries[entry.id] = entry
        return entry

    def release(self, entry: Entry, said: list[Said] | None) -> None:
        """The request is over: extend the transcript (None: the turn failed, the session is closed; so is a session
        left with nothing, one whose parked file could not be restored)."""
        with self.lock:
            entry.busy, entry.last_used = False, time.monotonic()
            if said is None or not said and not entry.transcript and entry.session is None and entry.parked is None:
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

    def drop(self, entry: Entry) -> None:
        """Close an idle session the server cannot keep (parking failed, over the disk quota)."""
        with self.lock:
            if not entry.busy:
                self._close(entry)

    def _close(self, entry: Entry) -> None:
        self.entries.pop(entry.id, None)
        if isinstance(entry.parked, Path):
            entry.parked.unlink(missing_ok=True)
            entry.parked.with_suffix(".json").unlink(missing_ok=True)
        entry.session = entry.parked = None
        self.closed_total += 1

    def _expire(self) -> None:
        now = time.monotonic()
        for entry in list(self.entries.values()):
            if not entry.busy and now - entry.last_used > self.config.session_ttl_s:
                self._close(entry)

    def over_quota(self) -> list[Entry]:
        """Parked sessions (on disk or in host memory) to close, least recently used first, until the rest fit the
        park quota."""
        quota = self.config.park_quota
        with self.lock:
            parked = [e for e in self.entries.values() if e.parked is not None and not e.busy]
            parked.sort(key=lambda e: e.last_used)
        total, out = sum(e.parked_bytes for e in parked), []
        while quota is not None and parked and total > quota:
            out.append(parked.pop(0))
            total -= out[-1].parked_bytes
        return out

    def adopt(self, entry: Entry) -> None:
        """Take a session parked by an earlier run of the server (server.parking.adopt)."""
        with self.lock:
            self.entries[entry.id] = entry

    def idle_resident(self) -> list[Entry]:
        """Idle sessions whose caches are resident, least recently used first (what parking frees)."""
        with self.lock:
            found = [e for e in self.entries.values() if not e.busy and e.session is not None]
        return sorted(found, key=lambda e: e.last_used)

    def idle(self) -> list[Entry]:
        """Every idle session, resident or parked (what shutdown parks to disk)."""
        with self.lock:
            return [e for e in self.entries.values() if not e.busy]

    def counts(self) -> dict[str, int]:
        with self.lock:
            states = [e.state for e in self.entries.values()]
            held = sum(e.held_bytes for e in self.entries.values() if e.session is not None)
        return {s: states.count(s) for s in ("active", "idle", "parked")} | {"held_bytes": held}

    def shutdown(self) -> None:
        if self.park_lock is not None:
            os.close(self.park_lock)
            self.park_lock = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def owner_of(authorization: str | None, user: object) -> str:
    """Who sent a request, as far as prefix matching may tell clients apart: a digest of its API key (the
    `Authorization` header) and OpenAI's `user` field. Two clients that send the same conversation so far are told
    apart by these only; a digest, so that no key is kept in memory or in a park folder's sidecar."""
    user = user if isinstance(user, str) else ""
    if not authorization and not user:
        return ""
    return hashlib.sha256(f"{authorization or ''}\0{user}".encode()).hexdigest()[:32]
