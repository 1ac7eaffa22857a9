"""The read-eval loop of `nexus-agent chat`: one request = one agent episode on the session's persistent cache."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from agent.protocols import ToolCall
from agent.trajectory import tool_of
from cli.safe_text import StreamFilter, safe_lines, safe_text
from pipeline import chat as cs

HELP = "commands: /stats (cache stats per turn), /history (your requests), /yolo, /confirm, /help, /quit (or Ctrl-D)"


class Chat:
    """Reads requests, runs the agent on each, saves the conversation after every step.

    `conversation`: where the model and its memory live: a LocalConversation (pipeline/chat_local.py, a kvstore
    Session in this process) or a ServedConversation (pipeline/chat_served.py, a model in a `nexus-agent serve`)."""

    def __init__(self, console: Console, folder: Path, name: str, state, conversation, sandbox, agent_cfg, yolo: bool):
        from agent.loop import Agent
        from agent.prompts import system_prompt
        from agent.trajectory import TrajectoryWriter

        self.console, self.folder, self.name, self.state = console, folder, name, state
        self.sandbox, self.yolo, self.system = sandbox, yolo, system_prompt()
        self.conv = conversation
        self.conv.set_output(self._stream, self._note)
        self.writer = TrajectoryWriter(folder / cs.TRAJECTORY_FILE)
        self.agent = Agent(self.conv.model, cs.ChatEnvironment(sandbox), agent_cfg, self.writer, f"chat:{name}",
                           on_step=self._on_step, before_execute=self._confirm)  # fmt: skip
        self.interrupt = cs.TurnInterrupt(self._note)
        self.git_dirs = cs.repo_git_dirs(Path(state.repo))  # before the agent runs: it can rewrite .git
        self.streamed = StreamFilter()  # the model's streamed text, without what a terminal would act on

    def _print(self, *parts: str | tuple[str, str] | Text, **kwargs) -> None:
        """One line of trusted parts (a str, or (str, style)) and `safe_text`s: nothing in it is parsed as markup
        or emoji, so text from the model, the agent or the server is printed as it is (cli/safe_text.py)."""
        self.console.print(Text.assemble(*parts), **kwargs)

    def _note(self, msg: str) -> None:  # also called from the SIGINT handler, mid-stream: the filter is left alone
        self._print("\n", safe_text(msg, "yellow"))

    def run(self) -> None:
        self._banner()
        try:
            while (line := self._read()) is not None:
                if line.startswith("/"):
                    if not self._command(line):
                        break
                elif line:
                    self.request(line)
        finally:
            self.writer.close()
        hint = f"nexus-agent chat --session {self.name} --resume"
        self._print(safe_text(f"session saved in {self.folder} (continue with: {hint})"))

    def _read(self) -> str | None:
        while True:
            try:
                return input("\nyou> ").strip()
            except EOFError:
                return None
            except KeyboardInterrupt:
                self.console.print("\n(type /quit or press Ctrl-D to leave)")

    def _command(self, line: str) -> bool:
        cmd = line.split()[0].lower()
        if cmd in ("/quit", "/exit", "/q"):
            return False
        if cmd == "/stats":
            for line in self.conv.stats_lines():
                self._print(safe_text(line))
        elif cmd == "/history":
            for n, req in enumerate(self.state.requests, 1):
                self._print(f"{n}. ", safe_text(req))
        elif cmd in ("/yolo", "/confirm"):
            self.yolo = cmd == "/yolo"
            self.console.print("commands run without asking" if self.yolo else "asking before each command")
        else:
            self.console.print(HELP)
        return True

    def request(self, text: str) -> None:
        """One request: an agent episode; Ctrl-C ends it (at a step boundary, or now with a rollback); a model error
        (server down, HTTP error) is one line and a rollback to the last complete step."""
        from agent.errors import AgentError

        first = not self.conv.has_history
        msg = cs.request_message(text, first, self.state.unseen, self.sandbox.workdir)
        self.state.requests.append(text)
        self.state.unseen = ""
        messages = [{"role": "system", "content": self.system}, msg] if first else [msg]
        try:
            result = self._run_agent(messages)
        except cs.StopTurn:
            self._save()
            self._print(("turn stopped; the session keeps everything up to the last step", "yellow"))
            return
        except KeyboardInterrupt:
            self._rollback()
            self._print(("turn stopped; the session is back at its last complete step", "yellow"))
            return
        except AgentError as exc:  # its message can quote the model or the server
            self._rollback()
            how = " (the session is back at its last complete step; send the request again)"
            self._print(safe_text(f"\nerror: {exc}{how}", "red"))
            return
        self._save()
        self._report(result)

    def _run_agent(self, messages: list[dict[str, str]]):
        try:
            with self.interrupt:
                return self.agent.run(messages)
        finally:
            self._end_stream()

    def _stream(self, piece: str) -> None:
        sys.stdout.write(self.streamed.feed(piece))
        sys.stdout.flush()

    def _end_stream(self) -> None:
        """The end of a streamed reply: what the filter held back (a cut-off sequence's text)."""
        rest = self.streamed.flush()
        if rest:
            sys.stdout.write(rest)
            sys.stdout.flush()

    def _on_step(self, rec: dict[str, Any]) -> None:
        from kvstore.session.session import TurnStats

        self._end_stream()
        self.state.unseen = "" if rec["submitted"] else rec["observation"]
        self.conv.on_step(rec)
        self._save()
        self._print("\n", (f"step {rec['step']}", "bold"), " ", safe_text(tool_of(rec)))
        self._print(safe_lines(rec["observation"], 8))
        stats = TurnStats.from_dict(rec.get("stats") or {})
        if stats is not None:
            self._print(safe_text(stats.summary(), "dim"))
        self.interrupt.check()

    def _confirm(self, call: ToolCall) -> str | None:
        self._end_stream()
        if self.yolo or not cs.needs_confirmation(call):
            return None
        self.show_call(call)
        try:
            answer = input("[y]es / [n]o / [a]lways: ").strip().lower()
        except (EOFError, KeyboardInterrupt):
            raise cs.StopTurn from None  # the reply is complete, the session consistent
        if answer in ("a", "always"):
            self.yolo = True
        if answer in ("y", "yes", "a", "always"):
            return None
        return "The user declined to run this call. Ask for or try something else."

    def show_call(self, call: ToolCall) -> None:
        """The approval prompt's call, complete and as it runs: no markup, control characters shown as escapes,
        never wrapped by the console (a terminal's own wrapping keeps it whole when copied)."""
        self._print("\n", ("run?", "bold"), " ", safe_text(cs.describe(call), visible=True), soft_wrap=True)

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
            self._print("changes in the repo:\n", safe_text(changed))

    def _banner(self) -> None:
        mode = "yolo: commands run without asking" if self.yolo else "confirm mode: asks before each command"
        where = f" on {self.state.repo} (at /testbed in the sandbox) | {self.conv.describe()} | {mode}"
        self._print("nexus-agent chat ", safe_text(self.name, "bold"), safe_text(where))
        if self.state.requests:
            self._print(safe_text(f"resumed: {len(self.state.requests)} requests, {self.conv.attach()}"))
        self._print(HELP)
