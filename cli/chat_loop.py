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
    """Reads requests, runs the agent on each, saves the session after every step."""

    def __init__(self, console: Console, folder: Path, name: str, state, session, sandbox, agent_cfg, yolo: bool):
        from agent.backends.local import LocalModel
        from agent.loop import Agent
        from agent.prompts import system_prompt
        from agent.trajectory import TrajectoryWriter

        self.console, self.folder, self.name, self.state = console, folder, name, state
        self.sandbox, self.yolo, self.system = sandbox, yolo, system_prompt()
        self.model = LocalModel(session, on_token=self._stream)
        self.writer = TrajectoryWriter(folder / cs.TRAJECTORY_FILE)
        self.agent = Agent(self.model, cs.ChatEnvironment(sandbox), agent_cfg, self.writer, f"chat:{name}",
                           on_step=self._on_step, before_execute=self._confirm)  # fmt: skip
        self.interrupt = cs.TurnInterrupt(lambda msg: self.console.print(f"\n[yellow]{msg}[/yellow]"))

    @property
    def session(self):
        return self.model.session

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
            for t in self.session.turns:
                self.console.print(t.summary())
            self.console.print(f"{len(self.session.turns)} turns, {self.session.num_tokens} tokens in the history")
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
        """One request: an agent episode; Ctrl-C ends it (at a step boundary, or now with a rollback)."""
        first = not self.session.messages
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
            return
        self._save()
        self._report(result)

    def _stream(self, piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    def _on_step(self, rec: dict[str, Any]) -> None:
        from kvstore.session import TurnStats

        self.state.unseen = "" if rec["submitted"] else rec["observation"]
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
        if self.session.tokens:
            self.session.save(self.folder / cs.SESSION_FILE)
        self.state.save(self.folder)

    def _rollback(self) -> None:
        """A turn cut mid-step: go back to the state saved after its last complete step."""
        from kvstore.session import Session, SessionConfig

        path = self.folder / cs.SESSION_FILE
        s = self.session
        if path.exists():
            self.model.session = Session.load(path, model=s.model, tokenizer=s.tokenizer)
        else:
            self.model.session = Session(s.model, s.tokenizer, SessionConfig.from_dict(self.state.config))
        self.state = cs.ChatState.load(self.folder)
        self.console.print("[yellow]turn stopped; the session is back at its last complete step[/yellow]")

    def _report(self, result) -> None:
        how = f"{result.exit_reason}, {result.steps} steps, {result.elapsed_s:.1f} s"
        self.console.print(f"\n[bold]done[/bold] ({how})")
        if result.submission:
            self.console.print(result.submission, markup=False)
        if result.exit_reason == "token_limit":
            s = self.session
            self.console.print(
                f"[yellow]the conversation fills the model's positions ({s.num_tokens} of {s.max_positions}); "
                "start a new --session to go on[/yellow]"
            )
        changed = cs.changed_files(Path(self.state.repo))
        if changed:
            self.console.print(f"changes in the repo:\n{changed}", markup=False)

    def _banner(self) -> None:
        c = self.session.config
        mode = "yolo: commands run without asking" if self.yolo else "confirm mode: asks before each command"
        self.console.print(
            f"nexus-agent chat [bold]{self.name}[/bold] on {self.state.repo} (at /testbed in the sandbox) | "
            f"{c.model}, {c.policy}, budget {c.budget}, {c.protocol} | {mode}"
        )
        if self.state.requests:
            last = self.session.turns[-1].summary() if self.session.turns else "no turns yet"
            self.console.print(
                f"resumed: {len(self.state.requests)} requests, {self.session.num_tokens} tokens of history; {last}"
            )
        self.console.print(HELP)
