"""What chat shows of a tool's output and of a diff: the lines that matter, terminal-safe (cli/safe_text.py).

A tool's output is shown whole when it is short; a longer one keeps its head, its tail and, from the middle, the
lines that report an error (a traceback, pytest's `E ` and FAILED lines), each gap marked with how many lines it
hides; `/show N` prints it all. execute_bash's empty `[STDOUT]`/`[STDERR]` sections are left out.
"""

from __future__ import annotations

import re

from rich.text import Text

from cli.safe_text import terminal_safe

SHORT = 24  # an output of at most this many lines is shown whole
HEAD, TAIL = 6, 10  # lines kept at each end of a longer one
MIDDLE = 14  # most error lines kept from its middle
ERROR = re.compile(r"(?i)error|exception|traceback|fail|fatal|assert|^E\s|^\s*File \".*\", line \d+")
SECTION = re.compile(r"^\[(STDOUT|STDERR)\]\n\n?", re.M)
DIFF_STYLES = (("+++", "bold"), ("---", "bold"), ("+", "green"), ("-", "red"), ("@@", "cyan"), ("diff ", "bold"))


def plain_output(raw: str) -> list[str]:
    """The output's lines without execute_bash's section headers; stderr (when there is any) after a `stderr:`
    line. Control sequences are removed (terminal_safe)."""
    text = terminal_safe(raw)
    if "[STDOUT]" not in text:
        return text.strip("\n").splitlines()
    before, _, rest = text.partition("[STDOUT]")
    out, _, err = rest.partition("\n[STDERR]")
    lines = [x for x in before.strip("\n").splitlines() if x.strip() != "Error executing command:"]
    lines += out.strip("\n").splitlines()
    err_lines = err.strip("\n").splitlines()
    return [*lines, "stderr:", *err_lines] if err_lines else lines


def condensed(raw: str, step: int | str = "") -> Text:
    """The lines of a tool output worth showing (see the module doc), styled: errors red, gaps dim."""
    lines = plain_output(raw)
    out = Text()
    if not lines:
        return Text("(no output)", style="dim")
    keep = _kept(lines)
    hidden = 0
    for n, line in enumerate(lines):
        if n not in keep:
            hidden += 1
            continue
        if hidden:
            out.append(f"... {hidden} lines hidden (/show {step})\n", style="dim")
            hidden = 0
        out.append(line + "\n", style="red" if ERROR.search(line) else "")
    if hidden:
        out.append(f"... {hidden} lines hidden (/show {step})\n", style="dim")
    out.rstrip()
    return out


def _kept(lines: list[str]) -> set[int]:
    """Indexes of the lines shown: all of a short output; else head, tail and the middle's error lines."""
    if len(lines) <= SHORT:
        return set(range(len(lines)))
    keep = set(range(HEAD)) | set(range(len(lines) - TAIL, len(lines)))
    errors = [n for n in range(HEAD, len(lines) - TAIL) if ERROR.search(lines[n])]
    return keep | set(errors[-MIDDLE:])  # the last ones: a traceback ends with the error itself


def full(raw: str) -> Text:
    """The whole output (/show), terminal-safe."""
    return Text("\n".join(plain_output(raw)) or "(no output)")


def diff_text(diff: str, limit: int | None = None) -> Text:
    """A unified diff coloured (added green, removed red, hunks cyan), terminal-safe; `limit`: most lines shown."""
    lines = terminal_safe(diff).rstrip("\n").split("\n")
    out = Text()
    for line in lines[:limit]:
        style = next((s for prefix, s in DIFF_STYLES if line.startswith(prefix)), "")
        out.append(line + "\n", style=style)
    if limit is not None and len(lines) > limit:
        out.append(f"... {len(lines) - limit} more lines (/diff shows them all)\n", style="dim")
    out.rstrip()
    return out
