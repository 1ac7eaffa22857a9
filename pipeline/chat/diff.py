"""Unified diffs for chat: what a file_editor call would change (shown before it is approved) and what a turn
changed (pipeline.chat.snapshot). Both are computed on the host from the files as they are, read without following
a symlink the agent may have planted (the sandbox's `read_file`, pipeline.chat.snapshot.read_inside)."""

from __future__ import annotations

import difflib

from agent.protocols import ToolCall
from pipeline.chat.repo_files import shown_path
from pipeline.chat.snapshot import Change

EDITS = ("create", "str_replace", "insert")  # the file_editor commands a preview is made for
CONTEXT = 3  # lines of context around each hunk


def text_of(data: bytes | None) -> str | None:
    """Bytes as the file editor reads them (UTF-8, else Latin-1; CRLF as LF); None for a binary file."""
    if data is None:
        return ""
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError:
        return data.decode("latin-1").replace("\r\n", "\n")


def unified(path: str, before: str, after: str, new: bool = False, gone: bool = False) -> str:
    """The unified diff of one file (a/ and b/ prefixes as git writes them; /dev/null for a new or deleted one)."""
    path = shown_path(path)
    old_name, new_name = ("/dev/null" if new else f"a/{path}"), ("/dev/null" if gone else f"b/{path}")
    lines = difflib.unified_diff(_lines(before), _lines(after), old_name, new_name, n=CONTEXT)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _lines(text: str) -> list[str]:
    """Lines ended by "\n" only (a form feed or \x1c inside a line does not split it, as in git)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def turn_diff(changes: list[Change]) -> str:
    """The diff of every change of a turn, file by file."""
    out = []
    for c in changes:
        header = f"diff {shown_path(c.path)}\n"
        if c.note:
            out.append(f"{header}{c.note}\n")
            if c.before is None and c.after is None:
                continue
        before, after = text_of(c.before), text_of(c.after)
        if before is None or after is None:
            out.append(f"{header}Binary file {shown_path(c.path)} changed\n")
            continue
        body = unified(c.path, before, after, new=c.before is None, gone=c.after is None)
        if body or not c.note:
            out.append(header + (body or _no_text_change(c)))
    return "".join(out)


def _no_text_change(c: Change) -> str:
    """What a change with no line of text to show changed: an empty file added or removed, or only line endings."""
    if not c.before or not c.after:
        return "(empty file)\n"
    return (
        "(line endings only: \\r\\n and \\n)\n"
        if c.before.replace(b"\r\n", b"\n") == c.after.replace(b"\r\n", b"\n")
        else "(no change in the text)\n"
    )


def edit_preview(call: ToolCall, read, workdir: str = "/testbed") -> str | None:
    """The diff a file_editor create/str_replace/insert call would make, or one line saying why it will fail; None
    for any other call. `read(path)`: the file's current text, raising OSError-like errors when it cannot."""
    if call.name != "file_editor" or call.params.get("command") not in EDITS:
        return None
    path, command = call.params.get("path", ""), call.params["command"]
    name = path[len(workdir) + 1 :] if path.startswith(workdir.rstrip("/") + "/") else path.lstrip("/")
    try:
        current = read(path)
    except Exception:  # noqa: BLE001 - any failure to read is "no such file" for a preview
        current = None
    if command == "create":
        if current is not None:
            return f"(the call will fail: {path} already exists)"
        return unified(name, "", call.params.get("file_text", ""), new=True)
    if current is None:
        return f"(the call will fail: {path} cannot be read)"
    try:
        after = _edited(command, current, call.params)
    except _Fails as why:
        return f"(the call will fail: {why})"
    return unified(name, current, after) or "(no change)"


class _Fails(Exception):
    """Why the edit will fail (the tool will refuse it)."""


def _edited(command: str, text: str, params: dict[str, str]) -> str:
    """The file's text after the edit, as swe_env/tools/file_editor.py makes it; _Fails when the tool refuses it."""
    if command == "str_replace":
        old = params.get("old_str", "").replace("\r\n", "\n")
        count = text.count(old) if old else 0
        if count != 1:
            raise _Fails(f"old_str occurs {count} times in the file, not exactly once")
        return text.replace(old, (params.get("new_str") or "").replace("\r\n", "\n"), 1)
    try:
        after = int(str(params.get("insert_line", "")).strip())
    except ValueError:
        raise _Fails("insert_line is not an integer") from None
    split = text.split("\n")
    lines = [line + "\n" for line in (split[:-1] if split[-1] == "" else split)]
    if not 0 <= after <= len(lines):
        raise _Fails(f"insert_line {after} is outside [0, {len(lines)}]")
    new = (params.get("new_str") or "").replace("\r\n", "\n")
    return "".join(lines[:after]) + (new if new.endswith("\n") else new + "\n") + "".join(lines[after:])
