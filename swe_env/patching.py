"""Applying a patch inside a sandbox with SWE-bench's fallbacks: git apply, git apply --reject, patch --fuzz=5."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from swe_env.sandbox.base import Sandbox

APPLY_COMMANDS = (
    ("git apply", "git apply --verbose {file}"),
    ("git apply --reject", "git apply --verbose --reject {file}"),
    ("patch --fuzz=5", "patch --batch --forward --fuzz=5 -p1 -i {file}"),
)
# A file header naming a path inside a `.git` folder: git apply refuses those, `patch` would write them (a model's
# .git/config or hook planted in the grading sandbox, run by the grading's own git: reset_files' checkout).
_GIT_PATH = re.compile(
    r"^(?:diff --git|---|\+\+\+|rename from|rename to|copy from|copy to)\s.*?(?<=[\s/\"])\.git(?=[/\"\s]|$)", re.I
)
# A unified hunk's header: its old and new line counts (1 where left out) say how many lines its body has.
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
# A failed attempt may leave half its hunks (and .rej/.orig files) behind; the next one starts from a clean tree.
_RESET = "git reset --hard --quiet && git clean -fdq"


@dataclass(frozen=True)
class ApplyResult:
    """How applying one patch went."""

    method: str | None  # the command that applied it; None: none did
    log: str  # what the attempts printed


def apply_patch(sandbox: Sandbox, patch: str, name: str, reset_between: bool = True) -> ApplyResult:
    """Apply `patch` in the sandbox's repo, trying each fallback in turn."""
    text = patch if patch.endswith("\n") else patch + "\n"
    planted = next((line for line in _outside_hunks(text) if _GIT_PATH.match(line)), None)
    if planted is not None:
        return ApplyResult(None, f"refused: the patch writes inside a .git folder: {planted[:200]}\n")
    file = f"/tmp/nexus-{name}.diff"
    sandbox.write_file(file, text)
    logs = []
    for method, template in APPLY_COMMANDS:
        res = sandbox.execute(template.format(file=file), timeout=300)
        logs.append(f"$ {template.format(file=file)}\n{res.output}")
        if res.returncode == 0 and not res.timed_out:
            return ApplyResult(method, "".join(logs))
        if reset_between:
            sandbox.execute(_RESET, timeout=300)
    return ApplyResult(None, "".join(logs))


def _outside_hunks(patch: str) -> list[str]:
    """The lines of `patch` that are no hunk's body: file headers, git's extended headers, text between files.

    A unified hunk's body is the number of lines its header counts, as git apply and GNU patch both read it, so a
    removed line that reads `--- a/.git/x` is the body's, not a header. A hunk whose counted lines are not all body
    lines (` `, `-`, `+`, empty, `\\`) lies about its size: then every line is returned, and any that looks like a
    header is taken for one."""
    lines = patch.split("\n")
    outside: list[str] = []
    i = 0
    while i < len(lines):
        hunk = _HUNK.match(lines[i])
        outside.append(lines[i])
        i += 1
        if not hunk:
            continue
        old, new = (int(n) if n is not None else 1 for n in hunk.groups())
        while (old > 0 or new > 0) and i < len(lines):
            tag = lines[i][:1]
            i += 1
            if tag in (" ", ""):
                old, new = old - 1, new - 1
            elif tag == "-":
                old -= 1
            elif tag == "+":
                new -= 1
            elif tag != "\\":
                return lines
            if old < 0 or new < 0:
                return lines
    return outside


def reset_files(sandbox: Sandbox, patch: str, base_commit: str) -> None:
    """Put the files `patch` touches back to their base-commit state (SWE-bench does this before the test patch,
    so a model patch that edited the tests cannot change what they check)."""
    files = re.findall(r"^diff --git a/.* b/(.*)$", patch, flags=re.M)
    base = shlex.quote(base_commit)
    for f in files:
        q = shlex.quote(f)
        sandbox.execute(f"git checkout {base} -- {q} 2>/dev/null || rm -f -- {q}", timeout=60)
