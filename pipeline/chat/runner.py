"""A chat session driven request by request: each request is one agent turn on the session's persistent memory,
in the sandbox on the user's repo, with a checkpoint for /undo before it and the state saved after every step.

The runner takes its view's callbacks as `run_task` does (pipeline/run.py): `on_token` (the model's text as it is
written, without its call's markup), `on_step` (a step done: `views.Step`), `on_event` (notes: {"kind": "note" |
"warning" | "refused" | "cancelled" | "allowed" | "info", "text": ...}), plus `approve` (a call that needs the
user's yes: `views.Question` -> `approval.Answer`, None for a cancelled prompt; raising `StopTurn` ends the turn)
and `status` (a context manager shown while something slow runs). With no `approve`, no one can answer: a call
that needs approval is not run (`unattended` says why, to the model and the user) unless `yolo` or the session's
allowlist covers it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from agent.calls_xml import XmlCalls
from agent.errors import AgentError
from agent.loop import Agent
from agent.protocols import ToolCall
from agent.trajectory import TrajectoryWriter, tool_of
from pipeline.chat import approval, checkpoints, sessions
from pipeline.chat import instructions as agents_md
from pipeline.chat import snapshot as snap
from pipeline.chat.diff import edit_preview, turn_diff
from pipeline.chat.interrupt import StopTurn, TurnInterrupt
from pipeline.chat.sandbox import ChatEnvironment, changed_files, repo_git_dirs
from pipeline.chat.sessions import discard_if_empty
from pipeline.chat.state import TRAJECTORY_FILE, ChatState, request_message
from pipeline.chat.steps import ReplyText, is_edit, is_finish, stats_line, step_title
from pipeline.chat.views import Banner, Question, Step, Turn
from pipeline.lifetime import Terminated


class ChatRunner:
    """One open chat: `request(text)` runs a turn; the other methods are the chat's commands (undo, diff, ...).

    `conversation`: where the model and its memory live (pipeline.chat.local.LocalConversation, a kvstore Session
    in this process, or pipeline.chat.served.ServedConversation, a model in a `nexus-agent serve`)."""

    def __init__(
        self, folder: Path, name: str, state: ChatState, conversation, sandbox, agent_cfg, *, yolo: bool = False,
        env_line: str = "", approve: Callable[[Question], approval.Answer | None] | None = None,
        unattended: approval.Unattended = approval.PIPED, on_token: Callable[[str], None] | None = None,
        on_step: Callable[[Step], None] | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
        status: Callable[[str], AbstractContextManager] | None = None,
    ):  # fmt: skip

        self.folder, self.name, self.state, self.conv, self.sandbox = folder, name, state, conversation, sandbox
        self.yolo, self.env_line, self.timeout = yolo, env_line, agent_cfg.command_timeout
        self.approve, self.unattended = approve, unattended
        self.on_token, self.on_step, self.on_event = on_token, on_step, on_event
        self.status = status or (lambda text: nullcontext())
        calls = getattr(self.conv, "calls", None) or XmlCalls()  # how the model calls tools (agent.calls)
        self.system = calls.opening("", sandbox.workdir)[0]  # the format's system message (tools: with their specs)
        self.instructions_line = ""
        if not self.conv.has_history:  # AGENTS.md: read once, into a new session's system prompt
            found = agents_md.read(Path(state.repo))
            text = agents_md.system_prompt(self.system["content"], found)
            self.system, self.instructions_line = {**self.system, "content": text}, found.line
        self.conv.set_output(self._token, self._note)
        self.writer = TrajectoryWriter(folder / TRAJECTORY_FILE)
        self.env = ChatEnvironment(sandbox)
        self.agent = Agent(self.conv.model, self.env, agent_cfg, self.writer, f"chat:{name}", on_step=self._on_step,
                           before_execute=self.confirm, call_format=calls)  # fmt: skip
        self.outputs: dict[int, tuple[str, str]] = {}  # step of the last turn -> (its call, its whole output)
        self.cancelled = False  # a prompt of this turn was cancelled (Ctrl-C); a second cancel stops the turn
        self.interrupt = TurnInterrupt(self._note)
        self.git_dirs = repo_git_dirs(Path(state.repo))  # before the agent runs: it can rewrite .git
        self.reply_text = ReplyText()  # the streamed reply without its call's markup
        self.edit_diff: str | None = None  # the diff of the step's edit, until it is shown (once)
        self.closed = False

    @property
    def repo(self) -> Path:
        return Path(self.state.repo)

    def _emit(self, kind: str, text: str = "", **data: Any) -> None:
        if self.on_event is not None:
            self.on_event({"kind": kind, "text": text, **data})

    def _note(self, text: str) -> None:  # also called from the SIGINT handler, in the middle of a streamed reply
        self._emit("note", text)

    # --- a turn ---------------------------------------------------------------------------------------------------
    def request(self, text: str) -> Turn:
        """One request: an agent turn on a checkpoint of the repo (/undo); its report when it ended by itself."""
        first = not self.conv.has_history
        msg = request_message(text, first, self.state.unseen, self.sandbox.workdir, self.state.notice)
        told = (self.state.unseen, self.state.notice)  # what the request carries to the model
        self._checkpoint(len(self.state.requests) + 1, text)
        self.state.requests.append(text)
        self.state.unseen = self.state.notice = ""
        self.outputs, self.cancelled = {}, False
        turn = self._run_turn(text, [self.system, msg] if first else [msg])
        self._seal()
        if turn.result is not None:
            if turn.result.exit_reason == "token_limit":
                turn.note = self._not_sent(first, told) if not turn.result.steps else self.conv.token_limit_note()
            self._save()
            turn.changed = changed_files(self.repo, self.git_dirs)
            turn.diff = self.turn_diff()
        return turn

    def _not_sent(self, first: bool, told: tuple[str, str]) -> str:
        """The request did not fit in what is left of the model's context, so the model never saw it: it is dropped
        (a new session with nothing in its memory is not kept: it could not be resumed), and what it carried (an
        unseen output, an undo's notice) goes with the next one. What to shorten."""
        checkpoints.step_back(self.folder, len(self.state.requests))  # the turn never ran: nothing to /undo
        self.state.requests.pop()
        self.state.unseen, self.state.notice = told
        if not first:
            return ("the request does not fit in what is left of the model's context: nothing was sent; shorten it, "
                    "or start a new --session")  # fmt: skip
        read = self.instructions_line.startswith(f"{agents_md.FILE} read")
        what = f"the repo's {agents_md.FILE} (or the request)" if read else "the request"
        return (f"the first request does not fit in the model's context with the system prompt: nothing was sent; "
                f"shorten {what}, or use a model with a longer context")  # fmt: skip

    def _run_turn(self, text: str, messages: list[dict[str, str]]) -> Turn:
        """The agent's turn: Ctrl-C ends it (at a step boundary, or now with a rollback); a model error (server
        down, HTTP error) rolls back to the last complete step."""

        try:
            with self.interrupt:
                try:
                    return Turn(text, "done", self.agent.run(messages))
                finally:
                    self._end_reply()
        except StopTurn:
            self._save()
            return Turn(text, "stopped")
        except KeyboardInterrupt as exc:
            self._rollback()
            if isinstance(exc, Terminated):  # SIGTERM: the session is consistent, and the chat ends
                raise
            return Turn(text, "rolled_back")
        except AgentError as exc:  # its message can quote the model or the server
            self._rollback()
            return Turn(text, "error", error=str(exc))

    def _token(self, piece: str) -> None:
        shown = self.reply_text.feed(piece)
        if shown and self.on_token is not None:
            self.on_token(shown)

    def _end_reply(self) -> None:
        """A reply is complete: what was held back in case it began a call (it did not)."""
        rest = self.reply_text.end()
        if rest and self.on_token is not None:
            self.on_token(rest)

    def _on_step(self, rec: dict[str, Any]) -> None:
        """A step done: saved, then shown; a stop asked for (Ctrl-C) ends the turn here."""

        self._end_reply()
        self.state.unseen = "" if rec["submitted"] else rec["observation"]
        self.conv.on_step(rec)
        self._save()
        result, self.env.last = self.env.last, None
        raw = result.output if result is not None else rec["observation"]
        code = result.returncode if result is not None else None
        self.outputs[rec["step"]] = (tool_of(rec), raw)
        diff, self.edit_diff = self.edit_diff, None
        step = Step(rec["step"], step_title(rec.get("call")), tool_of(rec), raw, code, "output", diff,
                    stats_line(rec["step"], rec.get("stats") or {}), rec)  # fmt: skip
        step.shows = _shows(step, rec)
        if self.on_step is not None:
            self.on_step(step)
        self.interrupt.check()

    def confirm(self, call: ToolCall) -> str | None:
        """Before a call (the agent's `before_execute`): None runs it, a string is the model's observation instead."""

        self._end_reply()
        preview = edit_preview(call, self.sandbox.read_file)
        self.edit_diff = preview if preview and not preview.startswith("(") else None
        if self.yolo or not approval.needs_confirmation(call) or approval.allowed(call, self.state.allow):
            return None
        text = approval.describe(call)
        if self.approve is None:
            self._emit("refused", f"not run ({self.unattended.short}; --yolo or /allowlist): {text}")
            return self.unattended.observation()
        self.edit_diff = None  # the prompt shows it
        progs = approval.programs(call)
        answer = self.approve(Question(call, text, preview, progs))
        if answer is None:  # a cancelled prompt declines this call; a second one in the same turn stops the turn
            if self.cancelled:
                raise StopTurn
            self.cancelled = True
            self._emit("cancelled", "call cancelled (Ctrl-C again at the next prompt stops the turn)")
            return approval.DECLINED
        if answer.kind == "always" and progs:
            self.state.allow += [p for p in progs if p not in self.state.allow]
            self.state.save(self.folder)
            self._emit("allowed", f"allowed without asking in this session: {', '.join(progs)} (/allowlist)")
        return None if answer.kind in ("yes", "always") else approval.declined(answer.reason)

    def _checkpoint(self, turn: int, request: str) -> None:
        """The repo as it is before this turn: what /undo restores and the turn's diff compares with."""

        try:
            checkpoints.start(self.repo, self.folder, self.git_dirs, turn, request)
        except (snap.SnapshotError, OSError) as exc:
            (self.folder / snap.UNDO_DIR / "manifest.json").unlink(missing_ok=True)
            self._emit("warning", f"no undo for this turn: {exc}")

    def _seal(self) -> None:
        """The turn's end: what it left, so that /undo leaves alone what is changed after it."""

        try:
            checkpoints.seal(self.repo, self.folder, self.git_dirs)
        except (snap.SnapshotError, OSError) as exc:
            self._emit("warning", f"undo will take back every change since the turn started: {exc}")

    def _save(self) -> None:
        self.conv.save()
        self.state.save(self.folder)

    def _rollback(self) -> None:
        """A turn cut mid-step: back to the state saved after its last complete step."""
        self.conv.rollback()
        self.state = ChatState.load(self.folder)

    # --- the chat's commands --------------------------------------------------------------------------------------
    def turn_diff(self) -> str:
        """The diff of the repo against the snapshot of the last turn's start ("" when none or no change)."""

        try:
            return turn_diff(snap.changes(self.repo, self.folder, self.git_dirs))
        except snap.SnapshotError as exc:
            return f"(no diff: {exc})"

    def undo(self, n: int = 1) -> list:
        """Put the repo back as it was before the last `n` turns: [(turn, snapshot.Restored)], the most recent
        first (fewer when the checkpoints end first); the next request tells the model. SnapshotError: nothing to
        undo."""

        undone = checkpoints.undo(self.repo, self.folder, self.git_dirs, n)
        changed = sorted({p for _, done in undone for p in done.changed + done.removed})
        if changed:
            told = UNDONE.format(n=len(undone), what=", ".join(changed))
            self.state.notice = f"{self.state.notice} {told}".strip()  # a second /undo before the next request adds
            self.state.save(self.folder)
        return undone

    def checkpoints(self) -> list:
        """The turns /undo can go back over, oldest first (pipeline.chat.checkpoints.Checkpoint)."""

        return checkpoints.load(self.folder)

    def clear_allowlist(self) -> None:
        self.state.allow = []
        self.state.save(self.folder)

    def sessions(self) -> list:
        """This repo's saved sessions, the most recently used first (pipeline.chat.sessions.SessionInfo)."""

        return sessions.sessions_of(self.repo)

    def delete_session(self, name: str):
        """Delete another saved session; its SessionInfo (RunError: this one, or no such session)."""

        return sessions.delete(name, self.name)

    def stats_lines(self) -> list[str]:
        return self.conv.stats_lines()

    def banner(self) -> Banner:
        if self.yolo:
            mode = "yolo: commands run without asking"
        elif self.approve is None:
            mode = f"{self.unattended.short}: a command that needs approval is not run (--yolo runs it)"
        else:
            mode = "confirm mode: asks before each command"
        where = f" on {self.state.repo} (at /testbed in the sandbox) | {self.conv.describe()} | {mode}"
        notes = [self.instructions_line] if self.instructions_line else []
        notes += list(getattr(self.sandbox, "notes", ()))
        if self.state.requests:
            notes.append(f"resumed: {len(self.state.requests)} requests, {self.conv.attach()}")
        return Banner(self.name, where, self._sandbox_line(), notes)

    def _sandbox_line(self) -> str:
        limits = self.sandbox.config.limits
        return (
            f"sandbox: bubblewrap, no network; writable: the repo (/testbed) and a private /tmp, nothing else; "
            f"PATH: the agent's tools, {self.env_line}, the system's /usr/bin; the agent's shell runs read-only git "
            f"(status, diff, log, show, blame, ls-files, grep) and refuses the rest (chat shows diffs and undoes turns "
            f"itself); each command: {self.timeout:g} s, "
            f"{limits.memory_mb} MiB memory, {limits.disk_mb} MiB of new files in all"
        )

    def close(self) -> bool:
        """The chat's end: the trajectory closed; a session no request was sent in is removed. Whether it is kept."""

        if not self.closed:
            self.closed = True
            self.writer.close()
            self.kept = not discard_if_empty(self.folder)
        return self.kept


UNDONE = ("The user undid every change your last {n} turn(s) made to the files of the repository ({what}); they "
          "are as they were before those requests. Take this into account.")  # fmt: skip


def _shows(step: Step, rec: dict[str, Any]) -> str:
    """What a view shows below a step's title: nothing for finish (its summary comes at the turn's end), an edit's
    diff instead of the editor's snippet (nothing when the prompt showed it), else the output."""
    if is_finish(rec.get("call")) and rec["submitted"]:
        return "nothing"
    if is_edit(rec.get("call")) and not step.failed and not rec["observation"].lstrip().startswith("ERROR"):
        return "diff" if step.diff else "nothing"
    return "output"
