"""Shipped memory profiles for the built-in agent (`--memory-profile builtin`, the default).

Without a profile the first reply of a session is the weakest: until a reply has shown what the agent reads, the
opening is ranked by its own attention, and most of the gap to the next-reply oracle is there (docs/memory.md). The
agent this project ships always opens with the same fixed text (agent.prompts: the system prompt, and the instance
prompt around the issue), so its profile can be calibrated once per registry model and shipped with the package: no
run learns anything for it, and the first reply of every `solve` or `eval` session gets it.

The folder `shipped/` holds one profile file per model and `manifest.json`, which says for each: its file and the
file's SHA-256, the digest of the agent's fixed text it was calibrated under (`template_sha256`), the recorded
conversations it was calibrated on, and the command that rebuilds it (`nexus-agent calibrate --builtin ...`). A
profile is used only when all of it holds: its model is the run's, its file's checksum is the manifest's, and the
agent's fixed text is the one it was calibrated under; anything else is refused with one line and the run goes on
with no profile. Shipped profiles are marked exact (meta["exact"]): a session uses one only when its opening carries
the whole template, so a chat or another harness with the same system prompt but another first message gets none.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUILTIN_PROFILE = "builtin"  # --memory-profile builtin: the shipped profile of the run's model (the default)
SHIPPED = Path(__file__).with_name("shipped")  # package data: the profiles and their manifest
MANIFEST = "manifest.json"
SHIPPED_VERSION = 2  # the file names carry it: a run's label names the version it used
STATEMENT = "{issue}"  # the placeholder of the task's text in the fixed text whose digest the manifest records


STEPS = 5  # the step limit a calibration opening states (the default `solve` run's, pipeline.config.DEFAULT_MAX_STEPS);
# a run with another limit differs from the template in those few tokens at its very end, which an exact profile
# allows (kvstore.profiles.profile.SUFFIX_SLACK)


def agent_template(workdir: str = "/testbed") -> str:
    """The built-in agent's fixed text: its system prompt and its first user message with the issue left out (the
    text every `solve` and `eval` session of the XML call format opens with, whatever the task; the step limit the
    message ends with, agent.loop's, is written as 1 here: the digest notices a change of that line's wording)."""
    from agent.observation import with_steps
    from agent.prompts import instance_prompt, system_prompt

    return f"{system_prompt()}\n\n{with_steps(instance_prompt(STATEMENT, workdir), 1)}"


def template_digest() -> str:
    """SHA-256 of `agent_template()`: a shipped profile calibrated under other text is refused."""
    return hashlib.sha256(agent_template().encode()).hexdigest()


def agent_opening(messages: list[dict], statement: str, steps: int = STEPS) -> list[dict]:
    """`messages` (this project's system prompt first) with the first user message replaced by the built-in agent's:
    the instance prompt around `statement` and the step limit agent.loop adds to it. A recorded conversation as the
    built-in agent would have opened it."""
    from agent.observation import with_steps
    from agent.prompts import instance_prompt

    out, done = [], False
    for m in messages:
        if m["role"] == "user" and not done:
            m, done = {**m, "content": with_steps(instance_prompt(statement), steps)}, True
        out.append(m)
    return out


def placeholder_openings(messages: list[dict]) -> list[list[dict]]:
    """Two more openings of the agent (system prompt and first user message) around placeholder tasks: a
    calibration's `variants` (kvstore.profiles.calibrate), so that its template is the agent's fixed text, never a
    task's words shared by chance."""
    first = next(i for i, m in enumerate(messages) if m["role"] == "user")
    tasks = ("(the statement of another task)", "[one more task's text]")
    return [agent_opening(messages[: first + 1], t) for t in tasks]


def read_manifest(folder: Path | None = None) -> dict[str, Any]:
    """The shipped manifest ({"version", "profiles": {model: entry}}); an empty one when there is none."""
    path = (folder or SHIPPED) / MANIFEST
    if not path.is_file():
        return {"version": SHIPPED_VERSION, "profiles": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def resolve_builtin(model: str, folder: Path | None = None, say: Callable[[str], None] = _stderr) -> Path | None:
    """The shipped profile file of registry model `model` (in `folder`, default SHIPPED), or None: none shipped for
    it (silently: most models have none), or refused (one line to `say`: a checksum or template that does not match
    its manifest)."""
    folder = folder or SHIPPED
    entry = read_manifest(folder).get("profiles", {}).get(model)
    if entry is None:
        return None
    path = folder / entry["file"]
    why = None
    if not path.is_file():
        why = f"{path.name} is missing"
    elif file_sha256(path) != entry.get("sha256"):
        why = f"the checksum of {path.name} does not match its manifest (a damaged or replaced file)"
    elif entry.get("template_sha256") != template_digest():
        why = f"{path.name} was calibrated under another version of the agent's prompt (rebuild: {entry['command']})"
    if why is not None:
        say(f"memory profile builtin: refused: {why}; this run uses no profile")
        return None
    return path


def record(model: str, path: Path, sources: list[str], command: str) -> dict[str, Any]:
    """Enter the profile at `path` into its folder's manifest as `model`'s shipped profile; the entry."""
    folder = path.parent
    manifest = read_manifest(folder)
    entry = {
        "file": path.name,
        "sha256": file_sha256(path),
        "template_sha256": template_digest(),
        "sources": sources,
        "command": command,
    }
    manifest["version"] = SHIPPED_VERSION
    manifest.setdefault("profiles", {})[model] = entry
    manifest["profiles"] = dict(sorted(manifest["profiles"].items()))
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return entry


def portable(profile: str | Path | None) -> str | None:
    """A profile as a run folder records it: a shipped one by its name ("builtin:builtin-vN-MODEL.pt"), so that a
    run resumes wherever the package is installed (its fingerprint still checks the content); another by its path."""
    if profile is None:
        return None
    path = Path(profile)
    return f"{BUILTIN_PROFILE}:{path.name}" if path.parent.resolve() == SHIPPED.resolve() else str(profile)


def shipped_name(model: str) -> str:
    """The file name of `model`'s shipped profile: a run's label carries its stem (builtin-vN-MODEL)."""
    return f"{BUILTIN_PROFILE}-v{SHIPPED_VERSION}-{model}.pt"
