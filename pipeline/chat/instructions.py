"""The repo's instructions for agents: AGENTS.md at the repo root (the AGENTS.md convention), read once when a
chat session starts and put in the model's system prompt.

The agent can write the repo, so the file is read safely: without following a symlink (O_NOFOLLOW), only when it
is a regular file (not a FIFO that would block, not a device, not a folder) and not binary (no NUL byte), at most
MAX_BYTES (the rest is cut, and said so), as UTF-8 (undecodable bytes replaced).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

FILE = "AGENTS.md"
MAX_BYTES = 32 * 1024
BLOCK = """

The repository's maintainers left instructions for agents working on it ({name} at its root). Follow them where \
they apply to the user's requests:
<instructions>
{text}
</instructions>"""


@dataclass
class Instructions:
    text: str  # what goes into the system prompt ("" when nothing)
    line: str  # one line for the user ("" when there is no AGENTS.md)


def read(repo: Path) -> Instructions:
    """The repo's AGENTS.md, or why it is not read."""
    try:
        fd = os.open(repo / FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return Instructions("", "")
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        return Instructions("", f"{FILE} not read: {why}")
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder
        os.close(fd)
        return Instructions("", f"{FILE} not read: not a regular file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    cut, raw = len(data) > MAX_BYTES, data[:MAX_BYTES].strip()
    if b"\0" in raw:
        return Instructions("", f"{FILE} not read: a binary file (it holds NUL bytes)")
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        return Instructions("", f"{FILE} is empty: nothing read")
    more = f" (cut at {MAX_BYTES // 1024} KiB)" if cut else ""
    return Instructions(text, f"{FILE} read into the model's instructions ({len(raw)} bytes{more})")


def system_prompt(base: str, found: Instructions) -> str:
    """The chat's system prompt with the repo's instructions, when it has some."""
    return base + BLOCK.format(name=FILE, text=found.text) if found.text else base
