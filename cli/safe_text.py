"""Text from the agent, the model or a task, made safe to print on a terminal with rich.

Whatever a model writes, a command prints or a dataset holds can carry terminal control sequences (ESC c resets the
terminal, CSI moves the cursor over what was shown, OSC sets the title or writes the clipboard, DCS talks to the
terminal), a bare carriage return that lets the rest of a line overwrite its start, bidi overrides that reorder what
is shown ("Trojan source"), and rich markup (`[conceal]...[/conceal]` hides text, `[/]` raises MarkupError) or emoji
codes (`:smile:`) that rich would interpret. Nothing of this must change what the user sees:

- `terminal_safe(text)`: the text with every control sequence and control character removed (tab and newline
  kept; a carriage return becomes a newline); `visible=True` instead shows each control character as an escape
  (`\\x1b`, `\\r`, `\\u202e`), so that nothing of a command the user approves is hidden.
- `safe_text(text)`: a rich `Text` of that (never parsed as markup or emoji), control escapes styled apart.
- `safe_markup(text)`: the same escaped for a rich markup string (where the console has emoji off).
- `StreamFilter`: the same for text that arrives in pieces (a sequence cut between two pieces is held back).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.text import Text

HOLD_MAX = 4096  # longest cut-off sequence a stream holds back; a longer one is printed as text (its controls removed)
_BIDI = "\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c"  # embeddings, overrides, isolates, marks
# one control sequence (ECMA-48): a string (OSC, DCS, SOS, PM, APC) up to its terminator (BEL or ST; another ESC
# aborts it, as in xterm), a CSI up to its final byte, any other ESC sequence (ESC c, ESC M, ESC ( B, SS2/SS3 ...);
# of an unterminated one only the controls are removed (by _CONTROL), its text stays visible
_SEQUENCE = re.compile(
    rf"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x9c\x1b]{{0,{HOLD_MAX}}}(?:\x07|\x1b\\|\x9c)"
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]",
    re.S,
)
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")  # all control characters but \t and \n
_INTRODUCER = re.compile(r"[\x1b\x90\x98\x9b\x9d\x9e\x9f\r]")
# the start of a sequence whose end has not arrived yet (a stream cut between two pieces)
_INCOMPLETE = re.compile(
    r"\x1b[\x20-\x2f]*"
    r"|(?:\x1b\[|\x9b)[\x20-\x3f]*"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x9c\x1b]*\x1b?"
    r"|\r+",
    re.S,
)
ESCAPE_STYLE = "reverse"  # how `safe_text(..., visible=True)` marks the escapes of control characters


def _shown(char: str) -> str:
    """A control character as an escape a user can read: \\r, \\x1b, \\u202e."""
    if char == "\r":
        return "\\r"
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def terminal_safe(text: str, visible: bool = False) -> str:
    """`text` without anything a terminal would act on: control sequences and characters (but \\t and \\n) and
    bidi controls are removed, a carriage return becomes a line break (\\r\\n one); `visible`: each control
    character is shown as an escape (`\\x1b[2J`), nothing removed."""
    if visible:
        return _CONTROL.sub(lambda m: _shown(m.group()), text)
    text = _SEQUENCE.sub("", text)
    text = re.sub(r"\r+\n?", "\n", text)
    return _CONTROL.sub("", text)


def safe_markup(text: str) -> str:
    """`text` for a rich markup string: controls removed, markup escaped (print it with emoji off)."""
    return escape(terminal_safe(text))


def safe_text(text: object, style: str = "", visible: bool = False) -> Text:
    """`text` (str() of it) as a rich Text, never parsed as markup or emoji; `visible`: control characters shown as
    escapes in ESCAPE_STYLE (the approval prompt: what is shown is all that runs)."""
    text = str(text)
    if not visible:
        return Text(terminal_safe(text), style=style)
    out, pos = Text(style=style), 0
    for m in _CONTROL.finditer(text):
        out.append(text[pos : m.start()])
        out.append(_shown(m.group()), style=ESCAPE_STYLE)
        pos = m.end()
    out.append(text[pos:])
    return out


def say_to(console: Console) -> Callable[[str], None]:
    """A `say` callback (the pipeline's progress lines, which name models, paths and tasks) printing as text."""
    return lambda line: console.print(safe_text(line))


def safe_lines(text: str, limit: int) -> Text:
    """The first `limit` lines of `text` made terminal-safe, and how many more there are."""
    lines = terminal_safe(text).splitlines()
    shown = "\n".join(lines[:limit]) + (f"\n... ({len(lines) - limit} more lines)" if len(lines) > limit else "")
    return Text(shown)


class StreamFilter:
    """`terminal_safe` for text that arrives in pieces (a streamed reply): a sequence or a \\r cut at the end of a
    piece waits for the next one, so that its two halves are not printed as text."""

    def __init__(self) -> None:
        self.held = ""

    def feed(self, piece: str) -> str:
        """What of `held` + `piece` can be printed now."""
        text, cut = self.held + piece, len(self.held) + len(piece)
        for m in _INTRODUCER.finditer(text):
            if _INCOMPLETE.fullmatch(text, m.start()) and len(text) - m.start() <= HOLD_MAX:
                cut = m.start()
                break
        self.held = text[cut:]
        return terminal_safe(text[:cut])

    def flush(self) -> str:
        """The rest (the end of a reply): a cut-off sequence's text, its controls removed."""
        text, self.held = self.held, ""
        return terminal_safe(text)
