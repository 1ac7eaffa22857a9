#!/usr/bin/env python3
"""file_editor: view, create and edit files inside a sandbox (an R2E-Gym-style agent tool).

Commands (`--command` or the first positional argument):
* view: a file as `cat -n` style numbered lines (`--view_range "[start, end]"`, end -1 = to the end of the file;
  `--concise true` elides long Python function bodies); a directory as its tree, 2 levels deep, hidden entries skipped.
* create: write `--file_text` to a new file; an existing path is never overwritten.
* str_replace: replace `--old_str`, which must occur exactly once, with `--new_str` (empty when omitted).
* insert: insert `--new_str` after line `--insert_line` (0 = at the top).
* undo_edit: revert the last create/str_replace/insert made to that file.

Paths must be absolute. Edit history is kept per file in $NEXUS_TOOL_STATE (default /tmp/.nexus_tool_state), since
every call is a new process. Errors print one "ERROR: ..." line and exit with code 1.
Standard library only; runs under any python3 >= 3.8.
"""

from __future__ import annotations

import argparse
import ast
import base64
import hashlib
import json
import os
import sys
from pathlib import Path

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
SNIPPET_LINES = 4  # context lines shown around an edit
MAX_HISTORY = 50  # undo steps kept per file
CONCISE_MIN_BODY_LINES = 4  # function bodies at least this long are elided in a concise view
CLIPPED_NOTE = (
    "<response clipped><NOTE>To save on context only part of this output has been shown. Search inside the file "
    "(the `search` tool or `grep -n`) to find the line numbers you need, then view them with `view_range`.</NOTE>"
)


class EditorError(Exception):
    """A mistake in the call (bad path, missing parameter, no match); printed as one ERROR line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit 2 with a usage dump
        raise EditorError(message)


def emit(text: str) -> None:
    """Print as UTF-8 whatever the locale of the image is."""
    sys.stdout.buffer.write((text + "\n").encode("utf-8", errors="replace"))
    sys.stdout.flush()


def max_chars() -> int:
    try:
        return int(os.environ.get("NEXUS_VIEW_MAX_CHARS", "10000"))
    except ValueError:
        return 10000


def clip(text: str) -> str:
    limit = max_chars()
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    return text[: cut if cut > 0 else limit] + "\n" + CLIPPED_NOTE


# ---------------------------------------------------------------- reading, writing, history


def read_text(path: Path) -> str:
    """The file as text with "\\n" line ends (CRLF is restored on write); UTF-8, else Latin-1."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise EditorError(f"Cannot read {path}: {e.strerror or e}") from None
    if b"\0" in raw[:8192]:
        raise EditorError(f"{path} is a binary file; file_editor works on text files only.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.replace("\r\n", "\n")


def write_text(path: Path, text: str) -> None:
    """Write `text` keeping the file's encoding and CRLF line ends if it had them."""
    old = path.read_bytes() if path.exists() else b""
    if b"\r\n" in old:
        text = text.replace("\n", "\r\n")
    try:
        old.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        encoding = "latin-1"
    try:
        path.write_bytes(text.encode(encoding, errors="replace"))
    except OSError as e:
        raise EditorError(f"Cannot write {path}: {e.strerror or e}") from None


def history_file(path: Path) -> Path:
    state = Path(os.environ.get("NEXUS_TOOL_STATE", "/tmp/.nexus_tool_state"))
    return state / (hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:32] + ".json")


def load_history(path: Path) -> list:
    """Earlier versions of `path`, oldest first: base64 of the raw bytes, or None where the file did not exist."""
    try:
        return json.loads(history_file(path).read_text(encoding="utf-8"))["versions"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return []


def save_history(path: Path, versions: list) -> None:
    target = history_file(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps({"path": str(path), "versions": versions[-MAX_HISTORY:]}), encoding="utf-8")
        tmp.replace(target)
    except OSError as e:
        raise EditorError(f"Cannot save the edit history in {target.parent}: {e.strerror or e}") from None


def snapshot(path: Path) -> str | None:
    """The current version of `path` as undo_edit stores it: base64 of its bytes, None if it does not exist."""
    return base64.b64encode(path.read_bytes()).decode("ascii") if path.exists() else None


def remember(path: Path, before: str | None) -> str:
    """Record `before` (taken just before a successful edit) as the version undo_edit restores next.

    The edit is already made, so a history that cannot be saved is a note in the output, not an error."""
    try:
        save_history(path, load_history(path) + [before])
    except EditorError as e:
        return f"\nNote: undo_edit will not be able to revert this edit. {e}"
    return ""


# ---------------------------------------------------------------- formatting


def text_lines(text: str) -> list:
    """The lines of `text`; a final newline does not start an extra empty line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def numbered(lines: list, first: int = 1) -> str:
    """Lines as `cat -n` prints them, numbering from `first`."""
    return "\n".join(f"{first + i:6}\t{line.expandtabs()}" for i, line in enumerate(lines))


def snippet(text: str, start: int, end: int) -> str:
    """Lines start..end (1-based, inclusive, clamped to the file) of `text`, numbered."""
    lines = text.split("\n")
    start = max(1, start)
    return numbered(lines[start - 1 : end], start)


def parse_view_range(raw: str) -> list:
    parts = raw.strip().strip("[]()").replace(",", " ").split()
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 2:
        raise EditorError(f"Invalid view_range {raw!r}: expected two integers, e.g. [10, 20] or [10, -1].")
    return values


def parse_flag(raw: str) -> bool:
    return str(raw).strip().lower() in ("1", "true", "yes", "on")


# ---------------------------------------------------------------- view


def view_directory(path: Path) -> str:
    entries = [str(path)]

    def walk(directory: Path, depth: int) -> None:
        try:
            children = sorted(directory.iterdir(), key=lambda p: p.name)
        except OSError:
            return
        for child in children:
            if child.name.startswith("."):
                continue
            entries.append(str(child))
            if depth < 2 and child.is_dir() and not child.is_symlink():
                walk(child, depth + 1)

    walk(path, 1)
    header = f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden:\n"
    return clip(header + "\n".join(entries))


def concise_lines(text: str) -> list:
    """(line number, text) pairs with long function bodies replaced by one "... eliding lines a-b ..." entry."""
    lines = text.split("\n")
    try:
        nodes = [n for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    except SyntaxError:
        return list(enumerate(lines, 1))
    bodies = sorted((n.body[0].lineno, getattr(n.body[-1], "end_lineno", 0) or 0) for n in nodes)
    out, number = [], 1
    for first, last in bodies:
        if first < number or last - first + 1 < CONCISE_MIN_BODY_LINES:
            continue  # nested in a body elided already, or short enough to show
        out += list(enumerate(lines[number - 1 : first - 1], number))
        out.append((first, f"... eliding lines {first}-{last} ..."))
        number = last + 1
    return out + list(enumerate(lines[number - 1 :], number))


def view_file(path: Path, view_range: list | None, concise: bool) -> str:
    lines = text_lines(read_text(path))
    total = len(lines)
    pairs = concise_lines("\n".join(lines)) if concise else list(enumerate(lines, 1))
    if view_range is not None:
        start, end = view_range
        if not 1 <= start <= max(total, 1):
            raise EditorError(f"Invalid view_range {view_range}: the start line must be in [1, {total}].")
        if end != -1 and not start <= end <= total:
            raise EditorError(
                f"Invalid view_range {view_range}: the end line must be >= the start line and <= {total}, "
                "or -1 to view to the end of the file."
            )
        last = total if end == -1 else end
        pairs = [(n, line) for n, line in pairs if start <= n <= last]
    if concise:
        header = f"Here is a condensed view of {path} (long function bodies elided; use view_range to read them):\n"
    else:
        header = f"Here's the result of running `cat -n` on {path}:\n"
    body = "\n".join(f"{n:6} {line.expandtabs()}" for n, line in pairs)
    return clip(header + body)


# ---------------------------------------------------------------- edits


def create(path: Path, file_text: str | None) -> str:
    if path.exists():
        raise EditorError(f"File already exists at: {path}. Cannot overwrite it with 'create'.")
    if file_text is None:
        raise EditorError("Parameter `file_text` is required for command: create.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EditorError(f"Cannot create the directory {path.parent}: {e.strerror or e}") from None
    write_text(path, file_text)
    note = remember(path, None)
    shown = clip(numbered(text_lines(file_text)))
    return (
        f"File created at {path}. Here's the result of running `cat -n` on {path}:\n{shown}\n"
        "Review the file and make sure that it is as expected. Edit the file if necessary." + note
    )


def occurrence_lines(text: str, old: str) -> list:
    found, pos = [], text.find(old)
    while pos != -1:
        found.append(text.count("\n", 0, pos) + 1)
        pos = text.find(old, pos + len(old))
    return found


def str_replace(path: Path, old: str | None, new: str | None) -> str:
    if old is None:
        raise EditorError("Parameter `old_str` is required for command: str_replace.")
    if old == "":
        raise EditorError("Parameter `old_str` is empty; it must be text that occurs exactly once in the file.")
    new = new or ""
    text = read_text(path)
    old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
    found = occurrence_lines(text, old)
    if not found:
        raise EditorError(f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}.")
    if len(found) > 1:
        raise EditorError(
            f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines {found}. "
            "Please ensure it is unique."
        )
    before = snapshot(path)
    updated = text.replace(old, new, 1)
    write_text(path, updated)
    note = remember(path, before)
    first = found[0]
    shown = snippet(updated, first - SNIPPET_LINES, first + new.count("\n") + SNIPPET_LINES)
    return (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n"
        f"{clip(shown)}\nReview the changes and make sure they are as expected. Edit the file again if necessary."
        + note
    )


def insert(path: Path, insert_line: str | None, new: str | None) -> str:
    if insert_line is None:
        raise EditorError("Parameter `insert_line` is required for command: insert.")
    if new is None:
        raise EditorError("Parameter `new_str` is required for command: insert.")
    try:
        after = int(str(insert_line).strip())
    except ValueError:
        raise EditorError(f"Invalid insert_line {insert_line!r}: expected an integer.") from None
    text = read_text(path)
    lines = [line + "\n" for line in text_lines(text)]  # only "\n" ends a line, as in view; a last one gets one
    if not 0 <= after <= len(lines):
        raise EditorError(f"Invalid insert_line {after}: it must be in [0, {len(lines)}].")
    new = new.replace("\r\n", "\n")
    added = new if new.endswith("\n") else new + "\n"
    before = snapshot(path)
    updated = "".join(lines[:after]) + added + "".join(lines[after:])
    write_text(path, updated)
    note = remember(path, before)
    shown = snippet(updated, after + 1 - SNIPPET_LINES, after + added.count("\n") + SNIPPET_LINES)
    return (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n"
        f"{clip(shown)}\nReview the changes and make sure they are as expected (correct indentation, no duplicate "
        "lines, etc). Edit the file again if necessary." + note
    )


def undo_edit(path: Path) -> str:
    versions = load_history(path)
    if not versions:
        raise EditorError(f"No edit history found for {path}; there is nothing to undo.")
    before = versions.pop()
    if before is None:
        try:
            path.unlink()
        except OSError as e:
            raise EditorError(f"Cannot remove {path}: {e.strerror or e}") from None
        save_history(path, versions)
        return f"Last edit to {path} undone successfully: the file did not exist before, so it was removed."
    try:
        path.write_bytes(base64.b64decode(before))
    except OSError as e:
        raise EditorError(f"Cannot write {path}: {e.strerror or e}") from None
    save_history(path, versions)
    content = read_text(path)
    return f"Last edit to {path} undone successfully. Here's the result of running `cat -n` on {path}:\n" + clip(
        numbered(text_lines(content))
    )


# ---------------------------------------------------------------- entry point


def check_path(command: str, raw: str | None) -> Path:
    if not raw:
        raise EditorError(f"Parameter `path` is required for command: {command}.")
    path = Path(raw)
    if not path.is_absolute():
        suggestion = Path(os.getcwd()) / raw
        raise EditorError(
            f"The path {raw} is not an absolute path, it should start with `/`. Did you mean {suggestion}?"
        )
    if command == "create":
        return path
    if not path.exists():
        raise EditorError(f"The path {path} does not exist. Please provide a valid path.")
    if path.is_dir() and command != "view":
        raise EditorError(f"The path {path} is a directory and only the `view` command can be used on directories.")
    return path


def run(args: argparse.Namespace) -> str:
    if args.command is not None and args.command_opt is not None:
        raise EditorError(f"unrecognized arguments: {args.command}")
    command = args.command_opt or args.command
    if not command:
        raise EditorError(f"Parameter `command` is required; allowed values: {', '.join(COMMANDS)}.")
    if command not in COMMANDS:
        raise EditorError(f"Unrecognized command {command!r}; allowed values: {', '.join(COMMANDS)}.")
    path = check_path(command, args.path)
    if command == "view":
        if path.is_dir():
            if args.view_range:
                raise EditorError("The `view_range` parameter is not allowed when `path` points to a directory.")
            return view_directory(path)
        view_range = parse_view_range(args.view_range) if args.view_range else None
        return view_file(path, view_range, parse_flag(args.concise))
    if command == "create":
        return create(path, args.file_text)
    if command == "str_replace":
        return str_replace(path, args.old_str, args.new_str)
    if command == "insert":
        return insert(path, args.insert_line, args.new_str)
    return undo_edit(path)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="file_editor", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("command", nargs="?", help="one of: " + ", ".join(COMMANDS))
    parser.add_argument("--command", dest="command_opt", help="the same, as an option")
    parser.add_argument("--path", help="absolute path of a file or directory")
    for name in ("file_text", "old_str", "new_str", "insert_line", "view_range"):
        parser.add_argument("--" + name)
    parser.add_argument("--concise", default="false", help="true: elide long Python function bodies in a view")
    return parser


def main(argv: list | None = None) -> int:
    try:
        emit(run(build_parser().parse_args(argv)))
        return 0
    except EditorError as e:
        emit(f"ERROR: {e}")
    except Exception as e:  # the model must see a message, never a traceback
        emit(f"ERROR: file_editor failed: {type(e).__name__}: {e}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
