"""What a ChatRunner hands its view: a step done, a call to approve, a turn's end, the session's opening lines.

Plain data, so that a view (the CLI's console, a test, a Python caller) renders them as it likes; the text in them
comes from the model, the agent and the repo, so a terminal view prints it as text (cli/safe_text.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.protocols import ToolCall

FINISHED = ("agent", "max_step_limit")  # agent.loop's exit reasons of a turn whose model called finish


@dataclass
class Step:
    """One agent step, done: what it ran and what a view shows of it."""

    number: int
    title: str  # one line for its call (pipeline.chat.steps.step_title)
    tool: str  # the tool it called ("" when none)
    output: str  # the call's whole output (the observation when nothing ran)
    returncode: int | None  # the call's exit code (None: no call ran: a format error, a declined call)
    shows: str  # what a view shows below the title: "output", "diff" (an edit's) or "nothing" (finish, a shown edit)
    diff: str | None  # the edit's diff when it was not shown at an approval prompt
    stats: str  # one line of the model turn's statistics ("" when the model gave none)
    record: dict[str, Any] = field(repr=False, default_factory=dict)  # the agent's step record (agent.loop)

    @property
    def failed(self) -> bool:
        return self.returncode not in (None, 0)


@dataclass
class Question:
    """A call that needs the user's approval."""

    call: ToolCall
    text: str  # the call, complete, as it runs (pipeline.chat.approval.describe)
    preview: str | None  # an edit's diff, or why the edit will fail ("(...)"); None: not an edit
    programs: list[str] | None  # what `always` adds to the allowlist (None: nothing can cover this call)


@dataclass
class Turn:
    """How one request ended. `ended`: "done" (the agent's own end: `result.exit_reason`), "stopped" (Ctrl-C: the
    session keeps every complete step), "rolled_back" (cut mid-step: back at the last complete step) or "error" (a
    model or server error, `error`; rolled back too)."""

    request: str
    ended: str
    result: Any = None  # agent.loop.AgentResult when it ended by itself
    error: str = ""
    changed: str = ""  # `git status --short` of the repo after the turn
    diff: str = ""  # the turn's own diff (against the repo when it started)
    note: str = ""  # what the user should know about the session (it reached the model's positions)

    @property
    def finished(self) -> bool:
        """Whether the agent finished the request (called finish) rather than hitting a limit or being stopped."""
        return self.result is not None and self.result.exit_reason in FINISHED


@dataclass
class Banner:
    """What a chat says when it opens."""

    name: str  # the session's name
    where: str  # the repo, the model and its memory, the approval mode
    sandbox: str  # what the sandbox allows
    notes: list[str] = field(default_factory=list)  # AGENTS.md, the sandbox's notes, a resumed session's history
