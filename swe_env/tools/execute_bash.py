#!/usr/bin/env python3
"""execute_bash: run one bash command in the current directory (an R2E-Gym-style agent tool).

`--cmd` runs under `bash -c` with stdin closed and a timeout ($NEXUS_EXEC_TIMEOUT seconds, default 90). When it
ends or times out its whole process group is killed, so nothing it started in the background keeps running.
The output is the command's stdout and stderr, each under its own header (a very long stream keeps its start and
end), and the exit code is the command's (124 on a timeout). Interactive or state-changing commands (git,
ipython, jupyter, nohup, editors, terminal multiplexers) are refused with a message and exit code 1: the
environment takes the patch from git itself, and an interactive program would only hang until the timeout.
With $NEXUS_GIT_READ_ONLY=1 in its environment (chat's sandbox sets it: the user's repo has no patch to collect)
git's read-only subcommands run (status, diff, log, show, blame, ls-files, grep); every other git is still refused.
Standard library only; runs under any python3 >= 3.8.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading

BLOCKED = {
    "git": "the environment manages the repository and collects your changes itself",
    "ipython": "interactive shells cannot be used here; run a script with python instead",
    "jupyter": "notebooks cannot be used here; run a script with python instead",
    "nohup": "background processes cannot be left running",
    "vi": "interactive editors cannot be used here; use file_editor",
    "vim": "interactive editors cannot be used here; use file_editor",
    "nvim": "interactive editors cannot be used here; use file_editor",
    "nano": "interactive editors cannot be used here; use file_editor",
    "emacs": "interactive editors cannot be used here; use file_editor",
    "screen": "terminal multiplexers cannot be used here",
    "tmux": "terminal multiplexers cannot be used here",
}
GIT_READ_ONLY_ENV = "NEXUS_GIT_READ_ONLY"  # "1": the read-only git subcommands below are allowed (chat)
GIT_READ_ONLY = {"status", "diff", "log", "show", "blame", "ls-files", "grep"}
GIT_GLOBAL_OK = {"--no-pager", "-P", "--no-optional-locks"}  # options before the subcommand that change nothing
# options of those subcommands that write a file or start a program: refused even then (and `git -c`, a config)
GIT_WRITING = ("--output", "--open-files-in-pager", "--ext-diff")
OPERATOR_CHARS = ";&|()`\n"  # tokens made only of these end one command and start the next
# words after which the next word is again a command: shell keywords and programs that run their argument
PREFIXES = {"if", "then", "elif", "else", "while", "until", "do", "!", "{", "}", "$"}
PREFIXES |= {"sudo", "env", "time", "exec", "command", "builtin", "nice", "xargs"}
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
TIMEOUT_EXIT = 124
KEEP_BYTES = 512 * 1024  # of each output stream, at its start and at its end
ARG_MAX_BYTES = 100_000  # a longer command goes to bash as a script file (one argument may hold 128 KiB)


class BashToolError(Exception):
    """A mistake in the call; printed as one ERROR line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit 2 with a usage dump
        raise BashToolError(message)


def emit(text: str) -> None:
    """Print as UTF-8 whatever the locale of the image is."""
    sys.stdout.buffer.write((text + "\n").encode("utf-8", errors="replace"))
    sys.stdout.flush()


def strip_heredocs(cmd: str) -> str:
    """`cmd` without the bodies of its here-documents (their text is data, not commands)."""
    out, ending = [], None
    for line in cmd.split("\n"):
        if ending is not None:
            if line.strip() == ending:
                ending = None
            continue
        out.append(line)
        match = HEREDOC.search(line)
        if match:
            ending = match.group(2)
    return "\n".join(out)


def simple_commands(cmd: str) -> list:
    """The simple commands in `cmd`, each as its words from the one in command position to the next operator."""
    lexer = shlex.shlex(strip_heredocs(cmd), posix=True, punctuation_chars=OPERATOR_CHARS)
    lexer.whitespace = " \t\r"
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: bash will complain itself; check the first word only
        tokens = cmd.split()[:1]
    commands, current = [], None
    for token in tokens:
        if set(token) <= set(OPERATOR_CHARS):
            current = None
        elif current is not None:
            current.append(token)
        elif not (token in PREFIXES or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", token)):
            current = [token]
            commands.append(current)
    return commands


def command_words(cmd: str) -> list:
    """The words in command position: the first word of every simple command in `cmd`."""
    return [words[0] for words in simple_commands(cmd)]


def git_reads_only(args: list) -> bool:
    """Whether `git ARGS` is one of the read-only subcommands, with no option that writes a file or runs a program."""
    rest = list(args)
    while rest and rest[0].startswith("-"):  # options before the subcommand
        option = rest.pop(0)
        if option == "-C" and rest:
            rest.pop(0)
        elif option not in GIT_GLOBAL_OK:
            return False
    if not rest or rest[0] not in GIT_READ_ONLY:
        return False
    writes = [a for a in rest[1:] if a.startswith(GIT_WRITING) or (rest[0] == "grep" and a.startswith("-O"))]
    return not writes


def blocked_reason(cmd: str, git_read_only: bool = False) -> str | None:
    """The refusal of `cmd` (None: it may run); `git_read_only`: git's read-only subcommands may run."""
    for words in simple_commands(cmd):
        name = os.path.basename(words[0])
        if name == "git" and git_read_only and git_reads_only(words[1:]):
            continue
        if name in BLOCKED:
            return f"Bash command '{name}' is not allowed ({BLOCKED[name]}). Please use a different command or tool."
    return None


def exec_timeout() -> float:
    try:
        return float(os.environ.get("NEXUS_EXEC_TIMEOUT", "90"))
    except ValueError:
        return 90.0


class Capture(threading.Thread):
    """Reads one pipe to its end, keeping only its first and last KEEP_BYTES (an endless output cannot fill memory)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.head, self.tail, self.tail_len, self.dropped = fd, bytearray(), collections.deque(), 0, 0

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            room = KEEP_BYTES - len(self.head)
            self.head += chunk[: max(room, 0)]
            chunk = chunk[max(room, 0) :]
            if chunk:
                self.tail.append(chunk)
                self.tail_len += len(chunk)
                while self.tail_len - len(self.tail[0]) >= KEEP_BYTES:
                    old = self.tail.popleft()
                    self.tail_len -= len(old)
                    self.dropped += len(old)

    def data(self) -> bytes:
        note = f"\n[... {self.dropped} bytes of output omitted ...]\n".encode() if self.dropped else b""
        return bytes(self.head) + note + b"".join(list(self.tail))


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run(cmd: str, timeout: float) -> tuple:
    """(stdout, stderr, return code, timed out) of `bash -c cmd` in its own process group.

    When bash exits (or the timeout expires) the whole group is killed: nothing the command started in the
    background outlives it, and a background process holding the pipes open cannot stall the tool."""
    script = None
    argv = ["bash", "-c", "--", cmd]
    if len(cmd.encode("utf-8", errors="surrogateescape")) > ARG_MAX_BYTES:  # too long for one argument: a file
        fd, script = tempfile.mkstemp(prefix=".nexus-cmd-", suffix=".sh")
        with os.fdopen(fd, "wb") as fh:
            fh.write(cmd.encode("utf-8", errors="surrogateescape"))
        argv = ["bash", script]
    try:
        return _run(argv, timeout)
    finally:
        if script is not None:
            os.unlink(script)


def _run(argv: list, timeout: float) -> tuple:
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    readers = [Capture(proc.stdout.fileno()), Capture(proc.stderr.fileno())]
    for reader in readers:
        reader.start()
    try:
        code, timed_out = proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        code, timed_out = TIMEOUT_EXIT, True
    kill_group(proc)
    proc.wait()
    for reader in readers:
        reader.join(timeout=5)  # a descendant that left the group may hold a pipe: keep what was read
    return readers[0].data(), readers[1].data(), code, timed_out


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


def parse_cmd(argv: list | None) -> str:
    parser = _Parser(prog="execute_bash", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("cmd_pos", nargs="?", help="the command (positional form)")
    parser.add_argument("--cmd", help="the bash command to run")
    args = parser.parse_args(argv)
    if args.cmd is not None and args.cmd_pos is not None:
        raise BashToolError(f"unrecognized arguments: {args.cmd_pos}")
    cmd = args.cmd if args.cmd is not None else args.cmd_pos
    if cmd is None or not cmd.strip():
        raise BashToolError("Parameter `cmd` is required and must not be empty.")
    if "\0" in cmd:
        raise BashToolError("The command contains a NUL byte (\\0), which no shell command can hold; remove it.")
    return cmd


def main(argv: list | None = None) -> int:
    try:
        cmd = parse_cmd(argv)
        reason = blocked_reason(cmd, os.environ.get(GIT_READ_ONLY_ENV) == "1")
        if reason:
            emit(reason)
            return 1
        timeout = exec_timeout()
        out, err, code, timed_out = run(cmd, timeout)
    except BashToolError as e:
        emit(f"ERROR: {e}")
        return 1
    except Exception as e:  # the model must see a message, never a traceback
        emit(f"ERROR: execute_bash failed: {type(e).__name__}: {e}")
        return 1
    report = f"[STDOUT]\n\n{decode(out)}\n\n[STDERR]\n\n{decode(err)}"
    if timed_out:
        report = f"ERROR: The command timed out after {timeout:g} seconds and was killed.\n\n" + report
    elif code != 0:
        report = "Error executing command:\n\n" + report
    emit(report)
    return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as bash reports it


if __name__ == "__main__":
    sys.exit(main())
