"""Where the shared recorded conversations are: the mini-swe-agent traces of the shared data folder, which
`bench replay` and `bench reservoir` use by default (pipeline.conversations reads them)."""

from __future__ import annotations

import os
from pathlib import Path

TRACES_DIR = "agent-traces/deepseek-chat-swebench-lite-dev"  # under the shared data folder
# the reasoning set: DeepSeek-reasoner's thinking in `reasoning_content`, native tool calls (12, five without a reply)
REASONER_TRACES_DIR = "agent-traces/deepseek-reasoner-swebench-lite-dev"


def shared_data_dir() -> Path | None:
    """$NEXUS_SHARED_DATA, else `<repository root>/../shared/data`; None when neither exists."""
    env = os.environ.get("NEXUS_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[1].parent / "shared" / "data")
    return next((p for p in candidates if p.is_dir()), None)


def default_traces(folder: str = TRACES_DIR) -> list[Path]:
    """The shared mini-swe-agent traces of `folder` (sorted; by default the chat set), or [] when the shared data
    folder is absent."""
    root = shared_data_dir()
    return sorted((root / folder).glob("*.traj.json")) if root else []
