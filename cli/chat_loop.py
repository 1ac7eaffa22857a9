"""The read-eval loop of `nexus-agent chat`: one request = one agent episode on the session's persistent cache."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from agent.protocols import ToolCall
from agent.trajectory import tool_of
from cli.chat_commands import HELP, QUIT, run_command
from cli.chat_output import condensed, diff_text
from cli.safe_text import StreamFilter, safe_text
from pipeline import chat as cs
from pipeline import chat_approval as approval
from pipeline import chat_instructions as instructions
from pipeline.chat_steps import ReplyText, is_edit, is_finish, stats_line, step_title

TURN_DIFF_LINES = 80  # most lines of a turn's diff shown after it (/diff shows it all)


class Chat:
    """Reads requests, runs the agent on each, saves the conversation after every step.

    `conversation`: where the model and its memory live: a LocalConversation (pipeline/chat_local.py, a kvstore
    Session in this process) or a ServedConversation (pipeline/chat_served.py, a model in a `nexus-agent serve`)."""

    def __init__(
        self, console: Console, folder: Path, name: str, state, conversation, sandbox, agent_cfg, yolo: bool,
        env_line: str = "", interactive: bool = True,
    ):  # fmt: skip
        from agent.loop import Agent
        from agent.prompts import system_prompt
        from agent.trajectory import TrajectoryWriter

        self.console, self.folder, self.name, self.state = console, folder, name, state
        self.sandbox, self.yolo, self.system = sandbox, yolo, system_prompt()
        self.conv = conversation
        self.instructions_line = ""  # AGENTS.md: read once, when the session has no history (before the agent runs)
        if not self.conv.has_history:
            found = instructions.read(Path(state.repo))
            self.system, self.instructions_line = instructions.system_prompt(self.system, found), found.line
        self.interactive = interactive  # input is a terminal: a call that needs approval can be asked about
        self.conv.set_output(self._stream, self._note)
        self.writer = TrajectoryWriter(folder / cs.TRAJECTORY_FILE)
        self.env = cs.ChatEnvironment(sandbox)
        self.agent = Agent(self.conv.model, self.env, agent_cfg, self.writer, f"chat:{name}", on_step=self._on_step,
                           before_execute=self._confirm, call_format=getattr(self.conv, "calls", None))  # fmt: skip
        self.env_line, self.timeout = env_line, agent_cfg.command_timeout
        self.outputs: dict[int, tuple[str, str]] = {}  # step of the last turn -> (its call, its whole output)
        self.cancelled = False  # Ctrl-C at an approval prompt of this turn declined a call; a second one stops it
        self.interrupt = cs.TurnInterrupt(self._note)
        self.git_dirs = cs.repo_git_dirs(Path(state.repo))  # before the agent runs: it can rewrite .git
        self.streamed = StreamFilter()  # the model's streamed text, without what a terminal would act on
        self.reply_text = ReplyText()  # ... and without its call's markup (the step's title line says it)
        self.edit_diff: str | None = None  # the diff of the step's edit, until it is shown (once)

    def _print(self, *parts: str | tuple[str, str] | Text, **kwargs) -> None:
        """One line of trusted parts (a str, or (str, style)) and `safe_text`s: nothing in it is parsed as markup
        or emoji, so text from the model, the agent or the server is printed as it is (cli/safe_text.py)."""
        self.console.print(Text.assemble(*parts), **kwargs)

    say = _print

    def _note(self, msg: str) -> None:  # also called from the SIGINT handler, mid-stream: the filter is left alone
        self._print("\n", safe_text(msg, "yellow"))

    def run(self) -> None:
        self._banner()
        try:
            while (line := self._read()) is not None:
                if line.lower() in QUIT:
                    break
                if line.startswith("/"):
                    run_command(self, line)
                elif line:
                    self.request(line)
        finally:
            self.writer.close()
        from pipeline.chat_sessions import discard_if_empty

        if discard_if_empty(self.folder):
            self._print(safe_text(f"no request was sent: session {self.name} is not kept"))
            return
        hint = f"nexus-agent chat --session {self.name} --resume"
        self._print(safe_text(f"session saved in {self.folder} (continue with: {hint})"))

    def _read(self) -> str | None:
        while True:
            try:
                return input("\nyou> ").strip()
            except EOFError:
                return None
            except KeyboardInterrupt:
                self.console.print("\n(type exit or press Ctrl-D to leave)")

    def request(self, text: str) -> None:
        """One request: an agent episode on a snapshot of the repo (/undo), its diff shown at its end."""
        first = not self.conv.has_history
        msg = cs.request_message(text, first, self.state.unseen, self.sandbox.workdir, self.state.notice)
        self._snapshot(len(self.state.requests) + 1, text)
        self.state.requests.append(text)
        self.state.unseen = self.state.notice = ""
        self.outputs, self.cancelled = {}, False
        messages = [{"role": "system", "content": self.system}, msg] if first else [msg]
        result = self._run_turn(messages)
        self._seal()
        if result is not None:
            self._save()
            self._report(result)

    def _run_turn(self, messages: list[dict[str, str]]):
        """The agent's turn (None when it did not end by itself): Ctrl-C ends it (at a step boundary, or now with a
        rollback); a model error (server down, HTTP error) is one line and a rollback to the last complete step."""
        from agent.errors import AgentError

        try:
            return self._run_agent(messages)
        except cs.StopTurn:
            self._save()
            self._print(("turn stopped; the session keeps everything up to the last step", "yellow"))
        except KeyboardInterrupt:
            self._rollback()
            self._print(("turn stopped; the session is back at its last complete step", "yellow"))
        except AgentError as exc:  # its message can quote the model or the server
            self._rollback()
            how = " (the session is back at its last complete step; send the request again)"
            self._print(safe_text(f"\nerror: {exc}{how}", "red"))
        return None

    def _snapshot(self, turn: int, request: str) -> None:
        """The repo as it is before this turn: what /undo restores and the turn's diff compares with."""
        from pipeline import chat_checkpoints
        from pipeline import chat_snapshot as snap

        try:
            chat_checkpoints.start(Path(self.state.repo), self.folder, self.git_dirs, turn, request)
        except (snap.SnapshotError, OSError) as exc:
            (self.folder / snap.UNDO_DIR / "manifest.json").unlink(missing_ok=True)
            self._print(safe_text(f"no undo for this turn: {exc}", "yellow"))

    def _seal(self) -> None:
        """The turn's end: what it left, so that /undo leaves alone what is changed after it."""
        from pipeline import chat_checkpoints
        from pipeline import chat_snapshot as snap

        try:
            chat_checkpoints.seal(Path(self.state.repo), self.folder, self.git_dirs)
        except (snap.SnapshotError, OSError) as exc:
            self._print(safe_text(f"undo will take back every change since the turn started: {exc}", "yellow"))

    def turn_diff(self) -> str:
        """The diff of the repo against the snapshot of the last turn's start ("" when none or no change)."""
        from pipeline import chat_snapshot as snap
        from pipeline.chat_diff import turn_diff

        try:
            return turn_diff(snap.changes(Path(self.state.repo), self.folder, self.git_dirs))
        except snap.SnapshotError as exc:
            return f"(no diff: {exc})"

    def _run_agent(self, messages: list[dict[str, str]]):
        try:
            with self.interrupt:
                return self.agent.run(messages)
        finally:
            self._end_stream()

    def _stream(self, piece: str) -> None:
        sys.stdout.write(self.streamed.feed(self.reply_text.feed(piece)))
        sys.stdout.flush()

    def _end_stream(self) -> None:
        """The end of a streamed reply: what the filters held back (text that was not a call's start, a cut-off
        sequence's text)."""
        rest = self.streamed.feed(self.reply_text.end()) + self.streamed.flush()
        if rest:
            sys.stdout.write(rest)
            sys.stdout.flush()

    def _on_step(self, rec: dict[str, Any]) -> None:
        """A step done: its title line (`$ cmd`, `edit path`, ...), its output (an edit: its diff, once; finish:
        nothing, its summary comes at the turn's end) and one line of statistics."""
        self._end_stream()
        self.state.unseen = "" if rec["submitted"] else rec["observation"]
        self.conv.on_step(rec)
        self._save()
        result, self.env.last = self.env.last, None
        raw = result.output if result is not None else rec["observation"]
        failed = result is not None and result.returncode != 0
        code = f"  (exit {result.returncode})" if failed else ""
        self.outputs[rec["step"]] = (tool_of(rec), raw)
        title = step_title(rec.get("call"))
        self._print("\n", (f"step {rec['step']}", "bold"), " ", safe_text(title, visible=True), (code, "red"))
        self._step_output(rec, raw, failed)
        stats = stats_line(rec["step"], rec.get("stats") or {})
        if stats:
            self._print(safe_text(stats, "dim"))
        self.interrupt.check()

    def _step_output(self, rec: dict[str, Any], raw: str, failed: bool) -> None:
        diff, self.edit_diff = self.edit_diff, None
        if is_finish(rec.get("call")) and rec["submitted"]:
            return
        if is_edit(rec.get("call")) and not failed and not rec["observation"].lstrip().startswith("ERROR"):
            if diff:
                self._print(diff_text(diff, TURN_DIFF_LINES))
            return
        self._print(condensed(raw, rec["step"]))

    def _confirm(self, call: ToolCall) -> str | None:
        """Before a call: None runs it, a string is the model's observation instead (declined, not asked)."""
        from pipeline.chat_diff import edit_preview

        self._end_stream()
        preview = edit_preview(call, self.sandbox.read_file)
        self.edit_diff = preview if preview and not preview.startswith("(") else None
        if self.yolo or not cs.needs_confirmation(call) or approval.allowed(call, self.state.allow):
            return None
        if not self.interactive:
            self._print(safe_text(f"not run (input is not a terminal; --yolo or /allowlist): {cs.describe(call)}",
                                  "yellow", visible=True))  # fmt: skip
            return approval.NOT_INTERACTIVE
        self.show_call(call)
        self.edit_diff = None  # the prompt showed it
        return self._approve(call)

    def _approve(self, call: ToolCall) -> str | None:
        progs = approval.programs(call)
        always = f"[a]lways allow {', '.join(progs)} in this session" if progs else "[a]lways: not for this command"
        text = self._ask(f"[y]es / [n]o [reason for the model] / {always}: ")
        if text is None:  # Ctrl-C: this call is declined; a second Ctrl-C at a prompt of this turn stops it
            if self.cancelled:
                raise cs.StopTurn
            self.cancelled = True
            self._print(("call cancelled (Ctrl-C again at the next prompt stops the turn)", "yellow"))
            return approval.DECLINED
        answer = approval.parse_answer(text)
        if answer.kind == "always" and progs:
            self.state.allow += [p for p in progs if p not in self.state.allow]
            self.state.save(self.folder)
            self._print(safe_text(f"allowed without asking in this session: {', '.join(progs)} (/allowlist)"))
        return None if answer.kind in ("yes", "always") else approval.declined(answer.reason)

    def _ask(self, prompt: str) -> str | None:
        """The answer at the approval prompt (None: Ctrl-C); Ctrl-D stops the turn (the session is consistent)."""
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # not the turn's stop-after-step
        try:
            return input(prompt).strip()
        except KeyboardInterrupt:
            return None
        except EOFError:
            raise cs.StopTurn from None
        finally:
            signal.signal(signal.SIGINT, previous)

    def show_call(self, call: ToolCall) -> None:
        """The approval prompt's call, complete and as it runs: no markup, control characters shown as escapes,
        never wrapped by the console (a terminal's own wrapping keeps it whole when copied)."""
        from pipeline.chat_diff import edit_preview

        self._print("\n", ("run?", "bold"), " ", safe_text(cs.describe(call), visible=True), soft_wrap=True)
        preview = edit_preview(call, self.sandbox.read_file)
        if preview:
            self._print(("the edit's diff:", "bold"))
            self._print(diff_text(preview))

    def _save(self) -> None:
        self.conv.save()
        self.state.save(self.folder)

    def _rollback(self) -> None:
        """A turn cut mid-step: go back to the state saved after its last complete step."""
        self.conv.rollback()
        self.state = cs.ChatState.load(self.folder)

    def _report(self, result) -> None:
        how = f"{result.exit_reason}, {result.steps} steps, {result.elapsed_s:.1f} s"
        self._print("\n", ("done", "bold"), safe_text(f" ({how})"))
        if result.submission:
            self._print(safe_text(result.submission))
        if result.exit_reason == "token_limit":
            self._print(safe_text(self.conv.token_limit_note(), "yellow"))
        changed = cs.changed_files(Path(self.state.repo), self.git_dirs)
        if changed:
            self._print("changes in the repo (git status):\n", safe_text(changed))
        diff = self.turn_diff()
        if diff:
            self._print(("this turn's diff", "bold"), " (/undo takes it back):")
            self._print(diff_text(diff, TURN_DIFF_LINES))

    def _banner(self) -> None:
        mode = "yolo: commands run without asking" if self.yolo else "confirm mode: asks before each command"
        where = f" on {self.state.repo} (at /testbed in the sandbox) | {self.conv.describe()} | {mode}"
        self._print("nexus-agent chat ", safe_text(self.name, "bold"), safe_text(where))
        self._print(safe_text(self._sandbox_line(), "dim"))
        if self.instructions_line:
            self._print(safe_text(self.instructions_line))
        for note in getattr(self.sandbox, "notes", ()):
            self._print(safe_text(note))
        if self.state.requests:
            self._print(safe_text(f"resumed: {len(self.state.requests)} requests, {self.conv.attach()}"))
        self.console.print(HELP, markup=False, highlight=False)

    def _sandbox_line(self) -> str:
        """What the sandbox allows, said once at the start."""
        limits = self.sandbox.config.limits
        return (
            f"sandbox: bubblewrap, no network; writable: the repo (/testbed) and a private /tmp, nothing else; "
            f"PATH: the agent's tools, {self.env_line}, the system's /usr/bin; the agent's shell runs read-only git "
            f"(status, diff, log, show, blame, ls-files, grep) and refuses the rest (chat shows diffs and undoes turns "
            f"itself); each command: {self.timeout:g} s, "
            f"{limits.memory_mb} MiB memory, {limits.disk_mb} MiB of new files in all"
        )
