"""The read-eval loop of `nexus-agent chat`: one request = one agent episode on the session's persistent cache."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from agent.protocols import ToolCall
from agent.trajectory import tool_of
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

    def _note(self, msg: str) -> None:
        self.console.print(f"\n[yellow]{msg}[/yellow]", markup=True, highlight=False)

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
        self.console.print(f"session saved in {self.folder} (continue with: {hint})")

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
                self.console.print(line, markup=False)
        elif cmd == "/history":
            for n, req in enumerate(self.state.requests, 1):
                self.console.print(f"{n}. {req}")
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
            with self.interrupt:
                result = self.agent.run(messages)
        except cs.StopTurn:
            self._save()
            self.console.print("[yellow]turn stopped; the session keeps everything up to the last step[/yellow]")
            return
        except KeyboardInterrupt:
            self._rollback()
            self.console.print("[yellow]turn stopped; the session is back at its last complete step[/yellow]")
            return
        except AgentError as exc:
            self._rollback()
            self.console.print(
                f"\nerror: {exc} (the session is back at its last complete step; send the request again)",
                style="red", markup=False, highlight=False,
            )  # fmt: skip
            return
        self._save()
        self._report(result)

    def _stream(self, piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    def _on_step(self, rec: dict[str, Any]) -> None:
        from kvstore.session import TurnStats

        self.state.unseen = "" if rec["submitted"] else rec["observation"]
        self.conv.on_step(rec)
        self._save()
        obs = rec["observation"].splitlines()
        shown = "\n".join(obs[:8]) + (f"\n... ({len(obs) - 8} more lines)" if len(obs) > 8 else "")
        self.console.print(f"\n[bold]step {rec['step']}[/bold] {tool_of(rec)}", markup=True)
        self.console.print(shown, markup=False)
        stats = TurnStats.from_dict(rec.get("stats") or {})
        if stats is not None:
            self.console.print(f"[dim]{stats.summary()}[/dim]")
        self.interrupt.check()

    def _confirm(self, call: ToolCall) -> str | None:
        if self.yolo or not cs.needs_confirmation(call):
            return None
        self.console.print(f"\n[bold]run?[/bold] {cs.describe(call)}", markup=True)
        try:
            answer = input("[y]es / [n]o / [a]lways: ").strip().lower()
        except (EOFError, KeyboardInterrupt):
            raise cs.StopTurn from None  # the reply is complete, the session consistent
        if answer in ("a", "always"):
            self.yolo = True
        if answer in ("y", "yes", "a", "always"):
            return None
        return "The user declined to run this call. Ask for or try something else."

    def _save(self) -> None:
        self.conv.save()
        self.state.save(self.folder)

    def _rollback(self) -> None:
        """A turn cut mid-step: go back to the state saved after its last complete step."""
        self.conv.rollback()
        self.state = cs.ChatState.load(self.folder)

    def _report(self, result) -> None:
        how = f"{result.exit_reason}, {result.steps} steps, {result.elapsed_s:.1f} s"
        self.console.print(f"\n[bold]done[/bold] ({how})")
        if result.submission:
            self.console.print(result.submission, markup=False)
        if result.exit_reason == "token_limit":
            self.console.print(f"[yellow]{self.conv.token_limit_note()}[/yellow]")
        changed = cs.changed_files(Path(self.state.repo), self.git_dirs)
        if changed:
            self.console.print(f"changes in the repo:\n{changed}", markup=False)

    def _banner(self) -> None:
        mode = "yolo: commands run without asking" if self.yolo else "confirm mode: asks before each command"
        self.console.print(
            f"nexus-agent chat [bold]{self.name}[/bold] on {self.state.repo} (at /testbed in the sandbox) | "
            f"{self.conv.describe()} | {mode}"
        )
        if self.state.requests:
            self.console.print(f"resumed: {len(self.state.requests)} requests, {self.conv.attach()}")
        self.console.print(HELP)
