"""`nexus-agent chat` below the command line: a session on the user's repo that a Python caller drives as the CLI
does (`runner.ChatRunner`, opened by `opening.open_chat` from one `settings.ChatSettings`).

The modules: `state` (the session folder, chat.json, the request prompts), `sandbox` (the bubblewrap sandbox bound
to the repo, host-side git), `runner` (one request = one agent turn, approval, undo, the callbacks a view renders),
`opening` (a new or resumed session, its model and memory, the repo's Python env), `local` (the model in this
process; pipeline/chat/served.py: in a `nexus-agent serve`), `approval`, `interrupt` (Ctrl-C), `steps` (what a
step shows), `snapshot`, `checkpoints` and `diff` (undo and the turn's diff), `env` (the repo's Python env),
`instructions` (AGENTS.md), `sessions` (the saved sessions).

This module re-exports what other packages and pipeline/chat/served.py use, light to import (no torch).
"""

from pipeline.chat.approval import describe, needs_confirmation
from pipeline.chat.interrupt import StopTurn, TurnInterrupt
from pipeline.chat.sandbox import CHAT_TOOL_ENV, ChatEnvironment, changed_files, open_repo_sandbox, repo_git_dirs
from pipeline.chat.state import (
    SERVED_FILE,
    SESSION_FILE,
    STATE_FILE,
    TRAJECTORY_FILE,
    ChatState,
    new_chat_repo,
    request_message,
    session_dir,
)

__all__ = [
    "CHAT_TOOL_ENV",
    "SERVED_FILE",
    "SESSION_FILE",
    "STATE_FILE",
    "TRAJECTORY_FILE",
    "ChatEnvironment",
    "ChatState",
    "StopTurn",
    "TurnInterrupt",
    "changed_files",
    "describe",
    "needs_confirmation",
    "new_chat_repo",
    "open_repo_sandbox",
    "repo_git_dirs",
    "request_message",
    "session_dir",
]
