"""Where a chat session lives on disk and what its requests say to the model.

A session folder holds session.safetensors (the kvstore Session: token history, KV cache, messages, turn stats) or,
for a chat whose model runs in a `nexus-agent serve` (--server), conversation.json (pipeline/chat/served.py), plus
chat.json (the repo, the request count, an observation the model has not seen yet) and trajectory.jsonl. Both
state files are rewritten atomically after every agent step, so closing the program at any time loses at most the
step in progress.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import RunError
from pipeline.files import atomic_write
from pipeline.home import home

SESSION_FILE, STATE_FILE, TRAJECTORY_FILE = "session.safetensors", "chat.json", "trajectory.jsonl"
OPTIONAL_STATE = ("unseen", "server", "learn", "notice", "allow")  # chat.json keys that older sessions' files lack
SERVED_FILE = "conversation.json"  # a --server chat's conversation (pipeline/chat/served.py)

FIRST_REQUEST = """\
You are working with a user on the code repository checked out in {workdir}, in an interactive session. The user \
can see what you do and will send further requests after this one.

The user's request:
<request>
{request}
</request>

Use the tools to do what is asked (look before you change anything, and check your changes). In this session the \
shell may run read-only git (status, diff, log, show, blame, ls-files, grep); other git commands are refused. When \
the request is done, call finish with command=submit and put your answer, or a short account of what you changed, \
in `result`."""

NEXT_REQUEST = """\
{unseen}The user's next request:
<request>
{request}
</request>

As before: use the tools, then call finish with command=submit and your answer or account in `result`."""


def session_dir(name: str) -> Path:
    if not name or "/" in name or name.startswith(".") or not name.isprintable() or len(name.encode()) > 200:
        shown = name if len(name) <= 40 else name[:40] + "…"
        raise RunError(f"--session {shown!r}: use a plain name (letters, digits, - and _, at most 200 bytes)")
    return home() / "sessions" / name


@dataclass
class ChatState:
    """What chat.json holds beside the kvstore session."""

    repo: str  # the user's repository (host path), bound at /testbed
    config: dict[str, Any] = field(default_factory=dict)  # the kvstore SessionConfig the session was opened with
    requests: list[str] = field(default_factory=list)  # the user's requests, in order
    unseen: str = ""  # the last observation when a turn ended before the model saw it (sent with the next request)
    server: str = ""  # base URL of the `nexus-agent serve` the model runs in ("": a local model, `config`)
    learn: bool = False  # the session started with --learn, the default memory and --memory-profile auto: leaving it
    # while it has no profile keeps its conversation, to learn one from (pipeline.profiles.learn)
    notice: str = ""  # what the model is told before the next request (the user undid its last turn's changes)
    allow: list[str] = field(default_factory=list)  # programs run without asking here (pipeline.chat.approval)

    def save(self, folder: Path) -> None:
        atomic_write(folder / STATE_FILE, json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, folder: Path) -> ChatState:
        path = folder / STATE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RunError(f"no chat session in {folder} (start one without --resume)") from None
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON and bad UTF-8 alike
            raise RunError(f"{path} is corrupt ({type(exc).__name__}); delete {folder} to start over") from None
        problem = _state_problem(data)
        if problem:
            raise RunError(f"{path} is corrupt ({problem}); delete {folder} to start over")
        optional = {k: data[k] for k in OPTIONAL_STATE if k in data}
        return cls(data["repo"], data["config"], data["requests"], **optional)

    def check_resumable(self, folder: Path, repo: Path | None = None) -> None:
        """Refuse to resume what would silently lose the history: a missing cache file, a vanished repo; and a
        --repo that is not the session's."""
        if repo is not None and repo.resolve() != Path(self.repo):
            raise RunError(f"session {folder.name!r} works on {self.repo}, not {repo.resolve()}; drop --repo to resume")
        if not Path(self.repo).is_dir():
            raise RunError(f"session {folder.name!r} works on {self.repo}, which is no longer a folder")
        memory = folder / (SERVED_FILE if self.server else SESSION_FILE)
        if self.requests and not memory.is_file():
            raise RunError(
                f"{memory} is missing: {len(self.requests)} earlier request(s) cannot be restored; "
                f"delete {folder} to start over"
            )


def new_chat_repo(folder: Path, repo: Path | None) -> Path:
    """The repo of a new chat session (default: the current dir); RunError when the session name is taken."""
    if (folder / STATE_FILE).exists():
        raise RunError(
            f"session {folder.name!r} already exists ({folder}); continue it with --resume, or pick another --session"
        )
    repo = (repo or Path.cwd()).resolve()
    if not repo.is_dir():
        raise RunError(f"--repo {repo} is not a directory")
    return repo


def _state_problem(data: Any) -> str:
    """What is wrong with the shape of chat.json's content ("" when nothing)."""
    if not isinstance(data, dict):
        return "not a JSON object"
    expected = {"repo": str, "config": dict, "requests": list, "unseen": str, "server": str, "learn": bool,
                "notice": str, "allow": list}  # fmt: skip
    for key, kind in expected.items():
        if key in OPTIONAL_STATE and key not in data:
            continue
        if not isinstance(data.get(key), kind):
            return f"{key!r} is not a {kind.__name__}"
    if not all(isinstance(r, str) for r in data["requests"] + data.get("allow", [])):
        return "'requests' or 'allow' holds a non-string"
    return ""


def request_message(request: str, first: bool, unseen: str, workdir: str, notice: str = "") -> dict[str, str]:
    """The user message of one request (the first one introduces the session); `notice`: a note on what happened
    since the last turn (an undo), put before the request."""
    if first:
        return {"role": "user", "content": FIRST_REQUEST.format(workdir=workdir, request=request.strip())}
    before = f"(Output of your last call, which you had not seen yet:)\n{unseen}\n\n" if unseen else ""
    before += f"({notice})\n\n" if notice else ""
    return {"role": "user", "content": NEXT_REQUEST.format(unseen=before, request=request.strip())}
