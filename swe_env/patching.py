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
    r"^(?:diff --git|---|\+\+\+|rename from|rename to|copy from|copy to)\s.*?(?<=[\s/\"])\.git(?=[/\"\s]|$)",
    re.M | re.I,
)
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
    planted = _GIT_PATH.search(text)
    if planted:
        line = text[planted.start() : text.index("\n", planted.start())]
        return ApplyResult(None, f"refused: the patch writes inside a .git folder: {line[:200]}\n")
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


def reset_files(sandbox: Sandbox, patch: str, base_commit: str) -> None:
    """Put the files `patch` touches back to their base-commit state (SWE-bench does this before the test patch,
    so a model patch that edited the tests cannot change what they check)."""
    files = re.findall(r"^diff --git a/.* b/(.*)$", patch, flags=re.M)
    base = shlex.quote(base_commit)
    for f in files:
        q = shlex.quote(f)
        sandbox.execute(f"git checkout {base} -- {q} 2>/dev/null || rm -f -- {q}", timeout=60)
