"""Where the shared real data lives: `<repo root>/../shared/data`, or $NEXUS_SHARED_DATA; tests skip without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path | None:
    env = os.environ.get("NEXUS_SHARED_DATA", "").strip()
    for candidate in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if candidate.is_dir():
            return candidate
    return None


def shared_path(*parts: str) -> Path:
    """A path inside the shared data folder; skips the test (with the reason) when it is not there."""
    base = shared_data_dir()
    if base is None:
        pytest.skip("shared data not found: no ../shared/data beside the checkout and NEXUS_SHARED_DATA unset")
    path = base.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data {path} is missing")
    return path
