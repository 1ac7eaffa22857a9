"""chat's approval of a call: the answers at the prompt, the reason a decline gives the model, the session's
allowlist of programs (`a` at the prompt), the rule for a chat no one can answer (input that is not a terminal, a
one-shot --message) and which calls ask at all.

A shell command is covered by the allowlist when every program it runs is on it: the command is split at `&&`,
`||`, `;`, `|` and newlines, each part's program is its first word after `VAR=value` assignments (`python -m
pytest` for a module run), and a command with a substitution (`$(...)`, backticks, `<(...)`) or a redirection to a
file is never covered: it could run or write anything.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from agent.protocols import ToolCall
from agent.tool_specs import TOOLS

DECLINED = "The user declined to run this call. Ask for or try something else."
REASON = "The user declined to run this call, and said why: {reason}\nTake this into account and try something else."
NOT_INTERACTIVE = (
    "Not run: {why}, so no one can approve this call (it runs only with --yolo or when the session's allowlist "
    "covers its program). Say what you would run and why, or finish."
)
SEPARATORS = re.compile(r"&&|\|\||;|\||\n")
UNSAFE = re.compile(r"\$\(|`|<\(|>\(|(?<![0-9&])>(?!&)|[0-9]>(?!&)")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Unattended:
    """Why no one can answer an approval prompt: the model's observation says `why`, the user's line `short`."""

    why: str
    short: str

    def observation(self) -> str:
        return NOT_INTERACTIVE.format(why=self.why)


PIPED = Unattended("this chat reads its input from a pipe", "input is not a terminal")
ONE_SHOT = Unattended("this chat runs one --message with no one at a prompt", "--message runs unattended")


@dataclass
class Answer:
    """What the user said at the prompt: "yes", "no" (with a reason, maybe) or "always"."""

    kind: str
    reason: str = ""


def parse_answer(text: str) -> Answer:
    """`y`/`yes`, `a`/`always`, `n`/`no` [reason]; anything else declines (with no reason)."""
    word, _, rest = text.strip().partition(" ")
    word = word.lower()
    if word in ("y", "yes"):
        return Answer("yes")
    if word in ("a", "always"):
        return Answer("always")
    return Answer("no", rest.strip() if word in ("n", "no") else "")


def declined(reason: str) -> str:
    """The observation the model gets for a declined call."""
    return REASON.format(reason=reason) if reason else DECLINED


def programs(call: ToolCall) -> list[str] | None:
    """The programs a call runs, as the allowlist names them (None: it cannot be covered by one). A call of
    another tool than the shell is its tool's name (`file_editor`)."""
    if call.name != "execute_bash":
        return [call.name]
    cmd = str(call.params.get("cmd", ""))
    if UNSAFE.search(cmd.replace("2>&1", "").replace(">&2", "")):
        return None
    found = []
    for part in SEPARATORS.split(cmd):
        try:
            words = [w for w in shlex.split(part) if not ASSIGNMENT.match(w)] if part.strip() else []
        except ValueError:
            return None
        if words:
            found.append(_program(words))
    return found or None


def _program(words: list[str]) -> str:
    name = words[0].rsplit("/", 1)[-1]
    if re.fullmatch(r"python[0-9.]*", name) and len(words) > 2 and words[1] == "-m":
        return f"python -m {words[2]}"
    return name


def allowed(call: ToolCall, allowlist: list[str]) -> bool:
    """Whether every program the call runs is on the session's allowlist."""
    found = programs(call)
    return found is not None and all(p in allowlist for p in found)


def needs_confirmation(call: ToolCall) -> bool:
    """Whether confirm mode asks before this call (anything that may change files or run code)."""

    spec = TOOLS.get(call.name)
    return spec is None or not spec.reads_only(call.params)


def describe(call: ToolCall) -> str:
    """The call as the user should see it before approving it: complete (what is shown is all that runs; the
    console shows its control characters as escapes, cli/safe_text.py); a value of several lines as a block."""
    if call.name == "execute_bash" and set(call.params) <= {"cmd"}:
        return f"$ {call.params.get('cmd', '')}"
    inline = " ".join(f"{k}={v!r}" for k, v in call.params.items() if "\n" not in str(v))
    blocks = [f"\n  {k}:\n" + "\n".join("    " + line for line in str(v).split("\n"))
              for k, v in call.params.items() if "\n" in str(v)]  # fmt: skip
    return f"{call.name} {inline}".rstrip() + "".join(blocks)
