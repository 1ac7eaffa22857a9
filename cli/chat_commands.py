"""The slash commands of `nexus-agent chat`: each parses its words, asks the chat's runner
(pipeline/chat/runner.py) and shows the answer (cli/chat_loop.py reads the lines)."""

from __future__ import annotations

import shlex
import time

from cli.chat_output import diff_text, full
from cli.safe_text import safe_text
from pipeline.chat import sessions as chat_sessions
from pipeline.errors import RunError

HELP = """\
commands (or type a request for the agent):
  /diff           the whole diff of the last turn (against the repo when that turn started)
  /undo [N]       put the repo back as it was before the last N turns (default 1; again: one more)
  /checkpoints    the turns /undo can go back over: turn, time, request, files changed
  /show [N]       the full output of step N of the last turn (default: its last step)
  /sessions       this repo's saved sessions;  /sessions delete NAME  deletes one
  /stats          cache statistics per model turn;  /history  your requests
  /yolo, /confirm run commands without asking / ask before each command that can change something
  /allowlist      programs run without asking in this session (`a` at the prompt adds);  /allowlist clear
  /help;  exit, quit, /quit or Ctrl-D leave (the session is saved: --resume continues it)"""
QUIT = ("exit", "quit", "exit()", "quit()", ":q", "/quit", "/exit", "/q")


def run_command(chat, line: str) -> None:
    """One slash command (the caller handles the quit words); its words split as a shell would (a quoted name with
    a space is one word), or at spaces when its quotes do not close."""
    try:
        words = shlex.split(line) or line.split()
    except ValueError:
        words = line.split()
    cmd, args = words[0].lower(), words[1:]
    handler = COMMANDS.get(cmd)
    if cmd == "/help":
        chat.console.print(HELP, highlight=False, markup=False)
    elif handler is None:
        chat.say(safe_text(f"unknown command {words[0]}; /help lists them", "yellow"))
    else:
        handler(chat, args)


def _stats(chat, args: list[str]) -> None:
    for text in chat.runner.stats_lines():
        chat.say(safe_text(text))


def _history(chat, args: list[str]) -> None:
    for n, req in enumerate(chat.runner.state.requests, 1):
        chat.say(f"{n}. ", safe_text(req))


def _mode(chat, yolo: bool) -> None:
    chat.runner.yolo = yolo
    chat.say("commands run without asking" if yolo else "asking before each command that can change something")


def _show(chat, args: list[str]) -> None:
    outputs = chat.runner.outputs
    if not outputs:
        chat.say(("no step has run yet in this chat", "yellow"))
        return
    step = _count(args[0]) if args else max(outputs)
    if step is None or len(args) > 1:
        chat.say(("usage: /show [N] (N: a step number of the last turn)", "yellow"))
        return
    if step not in outputs:
        chat.say((f"no step {step} in the last turn (steps: {', '.join(map(str, sorted(outputs)))})", "yellow"))
        return
    chat.say(("step ", "bold"), (str(step), "bold"), " ", safe_text(outputs[step][0]))
    chat.say(full(outputs[step][1]))


def _count(word: str) -> int | None:
    """A command's number argument (None: not one): at most 18 ASCII digits (`²` is a digit to str.isdigit but
    not to int(), and int() refuses a string of over 4300 digits)."""
    return int(word) if word.isascii() and word.isdigit() and len(word) <= 18 else None


def _diff(chat, args: list[str]) -> None:
    text = chat.runner.turn_diff()
    chat.say(diff_text(text) if text else safe_text("no changes since the last turn started"))


def _undo(chat, args: list[str]) -> None:
    from pipeline.chat import snapshot as snap  # lazy: git, urllib, off --help

    n = _count(args[0]) if args else 1
    if not n or len(args) > 1:
        chat.say(("usage: /undo [N] (N: how many turns to go back, default 1)", "yellow"))
        return
    try:
        undone = chat.runner.undo(n)
    except snap.SnapshotError as exc:
        chat.say(safe_text(str(exc), "yellow"))
        return
    for turn, done in undone:
        chat.say(("undo: ", "bold"), safe_text(f"turn {turn}: {done.summary()}"))
        if done.unrestorable:
            chat.say(safe_text(f"not restorable (too large to keep): {', '.join(done.unrestorable)}", "yellow"))
    if len(undone) < n:
        chat.say(safe_text(f"no older checkpoint: {len(undone)} turn(s) undone", "yellow"))


def _checkpoints(chat, args: list[str]) -> None:
    stack = chat.runner.checkpoints()
    if not stack:
        chat.say(safe_text("no checkpoints: no turn of this session can be undone"))
        return
    chat.say(safe_text(f"checkpoints, most recent first (/undo N goes back N turns; {len(stack)} kept):"))
    for n, point in enumerate(reversed(stack), 1):
        chat.say(safe_text(f"  {n}. {point.describe()}"))


def _allowlist(chat, args: list[str]) -> None:
    if args == ["clear"]:
        chat.runner.clear_allowlist()
        chat.say(safe_text("allowlist cleared: every call that can change something asks again"))
    elif args:
        chat.say(("usage: /allowlist [clear]", "yellow"))
    elif chat.runner.state.allow:
        chat.say(safe_text(f"run without asking in this session: {', '.join(chat.runner.state.allow)}"))
    else:
        chat.say(safe_text("the allowlist is empty (answer `a` at the approval prompt to add a command's program)"))


def _sessions(chat, args: list[str]) -> None:
    if args[:1] == ["delete"]:
        if len(args) < 2:
            chat.say(("usage: /sessions delete NAME", "yellow"))
            return

        try:
            gone = chat.runner.delete_session(" ".join(args[1:]))  # a name with a space, quoted or not
        except RunError as exc:
            chat.say(safe_text(str(exc), "yellow"))
            return
        chat.say(safe_text(f"deleted session {gone.name} ({gone.requests} request(s), {gone.size / 2**20:.1f} MiB)"))
        return
    found = chat.runner.sessions()
    hint = "resume one with: nexus-agent chat --session NAME --resume"
    chat.say(safe_text(f"sessions of {chat.runner.state.repo} ({hint}):"))
    now = time.time()
    for info in found:
        mark = "  (this chat)" if info.name == chat.runner.name else ""
        chat.say("  ", safe_text(chat_sessions.describe(info, now) + mark))


COMMANDS = {
    "/stats": _stats,
    "/history": _history,
    "/yolo": lambda chat, args: _mode(chat, True),
    "/confirm": lambda chat, args: _mode(chat, False),
    "/show": _show,
    "/diff": _diff,
    "/undo": _undo,
    "/checkpoints": _checkpoints,
    "/allowlist": _allowlist,
    "/sessions": _sessions,
}
