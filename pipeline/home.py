"""Where nexus-agent keeps a user's own files: $NEXUS_AGENT_HOME, else ~/.local/share/nexus-agent (chat sessions
under sessions/, memory profiles under profiles/: pipeline.profiles.store)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("NEXUS_AGENT_HOME") or Path.home() / ".local" / "share" / "nexus-agent")
