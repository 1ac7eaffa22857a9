"""The console side of `nexus-agent chat`: it reads the user's lines and answers, and renders what the chat's
runner (pipeline/chat/runner.py) reports through its callbacks; the chat's logic lives there."""

from __future__ import annotations

import shlex
import signal
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from cli.chat_commands import HELP, QUIT, run_command
from cli.chat_output import condensed, diff_text
from cli.safe_text import StreamFilter, safe_text
from pipeline.chat import approval
from pipeline.chat.interrupt import StopTurn
from pipeline.chat.views import Question, Step, Turn
from pipeline.lifetime import Terminated

TURN_DIFF_LINES = 80  # most lines of a turn's diff shown after it (/diff shows it all)


class Chat:
    """Renders one chat on a console; `runner` (a ChatRunner made with `callbacks()`) is set before it runs.
    `interactive`: the input is a terminal, so a call that needs approval can be asked about."""

    def __init__(self, console: Console, interactive: bool = True) -> None:
        self.console, self.interactive = console, interactive
        self.runner: Any = None
        self.streamed = StreamFilter()  # the model's streamed text, without what a terminal would act on

    def callbacks(self) -> dict[str, Any]:
        """The ChatRunner callbacks that render on this console."""
        return {"on_token": self._stream, "on_step": self._on_step, "on_event": self._event,
                "approve": self._approve if self.interactive else None, "status": self.console.status}  # fmt: skip

    def _print(self, *parts: str | tuple[str, str] | Text, **kwargs) -> None:
        """One line of trusted parts (a str, or (str, style)) and `safe_text`s: nothing in it is parsed as markup
        or emoji, so text from the model, the agent or the server is printed as it is (cli/safe_text.py)."""
        self.console.print(Text.assemble(*parts), **kwargs)

    say = _print

    def run(self) -> None:
        """The read-eval loop: requests and slash commands until a quit word or Ctrl-D."""
        self.banner()
        try:
            while (line := self._read()) is not None:
                if line.lower() in QUIT:
                    break
                if line.startswith("/"):
                    run_command(self, line)
                elif line:
                    self.request(line)
        finally:
            kept = self.runner.close()
        self._left(kept)

    def one_shot(self, message: str) -> Turn:
        """`chat --message`: one request, shown as a piped chat shows it, then the chat is left."""
        self.banner(commands=False)
        self._print("\nyou> ", safe_text(message))
        turn = self.request(message)
        self._left(self.runner.close())
        return turn

    def _left(self, kept: bool) -> None:
        name = self.runner.name
        if not kept:
            self._print(safe_text(f"no request was sent: session {name} is not kept"))
            return
        hint = f"nexus-agent chat --session {shlex.quote(name)} --resume"  # a name with a space, quoted
        self._print(safe_text(f"session saved in {self.runner.folder} (continue with: {hint})"))

    def _read(self) -> str | None:
        while True:
            try:
                return input("\nyou> ").strip()
            except EOFError:
                return None
            except Terminated:
                raise
            except KeyboardInterrupt:
                self.console.print("\n(type exit or press Ctrl-D to leave)")

    def request(self, text: str) -> Turn:
        """One request run by the runner; how it ended, shown."""
        turn = self.runner.request(text)
        self._end_stream()
        if turn.ended == "stopped":
            self._print(("turn stopped; the session keeps everything up to the last step", "yellow"))
        elif turn.ended == "rolled_back":
            self._print(("turn stopped; the session is back at its last complete step", "yellow"))
        elif turn.ended == "error":
            how = " (the session is back at its last complete step; send the request again)"
            self._print(safe_text(f"\nerror: {turn.error}{how}", "red"))
        else:
            self._report(turn)
        return turn

    def _stream(self, piece: str) -> None:
        sys.stdout.write(self.streamed.feed(piece))
        sys.stdout.flush()

    def _end_stream(self) -> None:
        """Before anything else is printed: what the filter held back of the streamed reply (a cut-off sequence's
        text)."""
        rest = self.streamed.flush()
        if rest:
            sys.stdout.write(rest)
            sys.stdout.flush()

    def _event(self, event: dict[str, Any]) -> None:
        kind, text = event["kind"], event.get("text", "")
        if kind == "note":  # also from the SIGINT handler, mid-stream: the filter is left alone
            self._print("\n", safe_text(text, "yellow"))
            return
        self._end_stream()
        if kind in ("warning", "cancelled"):
            self._print(safe_text(text, "yellow"))
        elif kind == "refused":
            self._print(safe_text(text, "yellow", visible=True))
        else:
            self._print(safe_text(text))

    def _on_step(self, step: Step) -> None:
        """A step done: its title line (`$ cmd`, `edit path`, ...), its output (an edit: its diff, once; finish:
        nothing, its summary comes at the turn's end) and one line of statistics."""
        self._end_stream()
        code = f"  (exit {step.returncode})" if step.failed else ""
        self._print("\n", (f"step {step.number}", "bold"), " ", safe_text(step.title, visible=True), (code, "red"))
        if step.shows == "diff":
            self._print(diff_text(step.diff or "", TURN_DIFF_LINES))
        elif step.shows == "output":
            self._print(condensed(step.output, step.number))
        if step.stats:
            self._print(safe_text(step.stats, "dim"))

    def _approve(self, question: Question) -> approval.Answer | None:
        """The approval prompt: the call, then the answer (None: Ctrl-C at the prompt)."""
        self._end_stream()
        self.show_call(question)
        progs = question.programs
        always = f"[a]lways allow {', '.join(progs)} in this session" if progs else "[a]lways: not for this command"
        text = self._ask(f"[y]es / [n]o [reason for the model] / {always}: ")
        return None if text is None else approval.parse_answer(text)

    def _ask(self, prompt: str) -> str | None:
        """The answer at the approval prompt (None: Ctrl-C); Ctrl-D stops the turn (the session is consistent)."""
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # not the turn's stop-after-step
        try:
            return input(prompt).strip()
        except Terminated:
            raise
        except KeyboardInterrupt:
            return None
        except EOFError:
            raise StopTurn from None
        finally:
            signal.signal(signal.SIGINT, previous)

    def show_call(self, question: Question) -> None:
        """The approval prompt's call, complete and as it runs: no markup, control characters shown as escapes,
        never wrapped by the console (a terminal's own wrapping keeps it whole when copied)."""
        self._print("\n", ("run?", "bold"), " ", safe_text(question.text, visible=True), soft_wrap=True)
        if question.preview:
            self._print(("the edit's diff:", "bold"))
            self._print(diff_text(question.preview))

    def _report(self, turn: Turn) -> None:
        result = turn.result
        how = f"{result.exit_reason}, {result.steps} steps, {result.elapsed_s:.1f} s"
        self._print("\n", ("done", "bold"), safe_text(f" ({how})"))
        if result.submission:
            self._print(safe_text(result.submission))
        if turn.note:
            self._print(safe_text(turn.note, "yellow"))
        if turn.changed:
            self._print("changes in the repo (git status):\n", safe_text(turn.changed))
        if turn.diff:
            self._print(("this turn's diff", "bold"), " (/undo takes it back):")
            self._print(diff_text(turn.diff, TURN_DIFF_LINES))

    def banner(self, commands: bool = True) -> None:
        """The chat's opening lines (and the list of commands, for a chat that reads them)."""
        b = self.runner.banner()
        self._print("nexus-agent chat ", safe_text(b.name, "bold"), safe_text(b.where))
        self._print(safe_text(b.sandbox, "dim"))
        for note in b.notes:
            self._print(safe_text(note))
        if commands:
            self.console.print(HELP, markup=False, highlight=False)
