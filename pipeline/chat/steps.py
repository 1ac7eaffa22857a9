"""How chat shows a step: the model's free text without its call's markup, one title line for the call, and what
the step's output stands for (chat's logic below the CLI; the CLI prints it).

A live model's reply streams in as it is written; the call at its end (`<function=...>` text, or a Hermes/Qwen
`<tool_call>` block) is not shown as text: the step's title line says what it runs.
"""

from __future__ import annotations

from typing import Any

from kvstore.session.session import TurnStats

CALL_OPENERS = ("<function=", "<tool_call>")  # where a reply's call starts (agent.calls_xml, agent.calls_tools)
WORKDIR = "/testbed/"  # the repo in the sandbox: paths are shown relative to it
EDITS = ("create", "str_replace", "insert", "undo_edit")


class ReplyText:
    """A streamed reply's text up to its call: `feed` returns what can be shown now (a piece that may be the start
    of a call's opener is held back until it is told apart), `end` what is left at the reply's end."""

    def __init__(self) -> None:
        self.held, self.in_call = "", False

    def feed(self, piece: str) -> str:
        if self.in_call:
            return ""
        text = self.held + piece
        cut = min((i for i in (text.find(o) for o in CALL_OPENERS) if i >= 0), default=-1)
        if cut >= 0:
            self.held, self.in_call = "", True
            return text[:cut].rstrip(" \t")
        keep = _partial_opener(text)
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def end(self) -> str:
        """The reply is complete: what was held back (not a call), and a fresh start for the next reply."""
        rest = "" if self.in_call else self.held
        self.held, self.in_call = "", False
        return rest


def _partial_opener(text: str) -> int:
    """The length of the longest end of `text` that begins a call opener (0: none)."""
    for n in range(min(len(text), max(map(len, CALL_OPENERS)) - 1), 0, -1):
        if any(o.startswith(text[-n:]) for o in CALL_OPENERS):
            return n
    return 0


def relative(path: str) -> str:
    """A sandbox path as the user knows it: relative to the repo (the repo itself: `.`)."""
    if path.rstrip("/") == WORKDIR.rstrip("/"):
        return "."
    return path[len(WORKDIR) :] if path.startswith(WORKDIR) else path


def step_title(call: dict[str, Any] | None) -> str:
    """One line for a step's call: `$ cmd`, `edit path`, `view path`, `search term [in path]`, `finish`; `-` for a
    reply without a valid call."""
    if not call:
        return "-"
    name, params = call.get("name") or "-", call.get("params") or {}
    if name == "execute_bash":
        return f"$ {params.get('cmd', '')}"
    if name == "file_editor":
        verb = "edit" if params.get("command") in EDITS else str(params.get("command") or "file_editor")
        return f"{verb} {relative(str(params.get('path', '')))}"
    if name == "search":
        where = f" in {relative(str(params['path']))}" if params.get("path") else ""
        return f"search {params.get('search_term', '')}{where}"
    return name


def is_edit(call: dict[str, Any] | None) -> bool:
    return bool(call) and call.get("name") == "file_editor" and (call.get("params") or {}).get("command") in EDITS


def is_finish(call: dict[str, Any] | None) -> bool:
    """A finish step: its output is the turn's summary, shown once at the turn's end."""
    return bool(call) and call.get("name") == "finish"


TOKEN_COUNTS = (("prompt_tokens", "prompt"), ("completion_tokens", "completion"), ("total_tokens", "total"))


def stats_line(turn: int, stats: dict[str, Any]) -> str:
    """One readable line for a model turn's statistics: kvstore's cache statistics when the model has them (a local
    model, a `nexus-agent serve`), else the token counts another OpenAI-compatible server reports ("" when none)."""

    full = TurnStats.from_dict(stats)
    if full is not None:
        return full.summary()
    counts = [f"{label} {stats[key]} tok" for key, label in TOKEN_COUNTS if isinstance(stats.get(key), int)]
    if not counts:
        return ""
    return f"turn {turn}: " + ", ".join(counts) + " (no cache statistics from this server)"
