"""Parking an idle session's cache off the device (to host memory or a session file) and bringing it back.

Disk parking writes the whole session with kvstore's save (kvstore.session.persist) and loads it back exactly; host
parking keeps the cache's exported tensors in CPU memory (kvstore.export_state / restore_cache). Either way the
restored session continues as if it had never left (same tokens, same cache, same sampling generator).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from server.sessions import Entry


def park(entry: Entry, mode: str, folder: Path) -> None:
    """Move `entry`'s cache off the device; its `session` becomes None (disk) or keeps no cache (host)."""
    session = entry.session
    if mode == "disk":
        path = folder / f"{hashlib.sha256(entry.id.encode()).hexdigest()[:32]}.safetensors"  # never a client's path
        session.save(path)
        entry.parked, entry.session = path, None
    else:
        tensors, meta = session.cache.export_state()  # contiguous CPU copies
        session.cache = None
        entry.parked = (session, tensors, meta)
        entry.session = None
    entry.held_bytes = 0


def restore(entry: Entry, model, tokenizer, config) -> None:
    """Bring a parked session back onto the model's device."""
    import kvstore
    from kvstore.session.session import Session

    if isinstance(entry.parked, Path):
        session = Session.load(entry.parked, model=model, tokenizer=tokenizer, config=config)
        entry.parked.unlink(missing_ok=True)
    else:
        session, tensors, meta = entry.parked
        session.cache = kvstore.restore_cache(model, tensors, meta)
    entry.session, entry.parked = session, None
    entry.restores += 1
