"""The memory profiles in a folder as plain rows (`nexus-agent profiles`, a table or JSON). Nothing is imported for
an empty folder, and only torch (to read the files) for a full one: the listing once imported the evicting cache
and transformers with the profile class, 4-6 s before printing "no memory profiles"."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from kvstore.defaults import PROFILE_SUFFIX


def profile_files(folder: Path) -> list[Path]:
    """The profile files of `folder` in name order (none when it does not exist)."""
    return sorted(folder.glob(f"*{PROFILE_SUFFIX}")) if folder.is_dir() else []


def profile_rows(files: list[Path]) -> list[dict[str, Any]]:
    """One row per file: its model, architecture, template tokens, conversations and time written; a file that is
    no profile is a row with "damaged": true (a session given the store would stop on it)."""
    if not files:
        return []
    from kvstore.errors import KVStoreError
    from kvstore.profiles.profile import MemoryProfile

    rows = []
    for f in files:
        row: dict[str, Any] = {
            "file": f.name,
            "written": datetime.fromtimestamp(f.stat().st_mtime).isoformat("T", "seconds"),
        }
        try:
            p = MemoryProfile.load(f)
        except KVStoreError:
            rows.append(row | {"damaged": True})
            continue
        rows.append(row | {
            "damaged": False, "model": p.meta.get("model"), "num_layers": p.identity.get("num_layers"),
            "num_kv_heads": p.identity.get("num_kv_heads"), "prefix_tokens": len(p.prefix),
            "suffix_tokens": len(p.suffix), "conversations": p.conversations,
        })  # fmt: skip
    return rows
