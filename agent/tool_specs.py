"""The four tools the model may call, as the system prompt describes them and the parser checks them.

This is the tool contract's one source: the tool programs in swe_env/tools implement it (tests/agent/
test_tool_contract.py checks each program's arguments against it), and chat's confirm gate reads `read_only`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One parameter of a tool."""

    name: str
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()  # allowed values; empty = any string
    exact: bool = False  # text whose whitespace matters: only the newline the call format puts at each end is removed
    json_type: str = "string"  # its JSON Schema type under native tool calls (string, integer, boolean, array of
    # integers); every value reaches the tool program as text either way


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what it does, and its parameters."""

    name: str
    description: str
    params: tuple[Param, ...]
    read_only: bool | tuple[str, ...] = False  # True: every call only reads; a tuple: the `command`s that only read

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def reads_only(self, params: dict[str, str]) -> bool:
        """Whether a call with these parameters changes nothing (chat runs such calls without asking)."""
        if isinstance(self.read_only, bool):
            return self.read_only
        return params.get("command") in self.read_only


FILE_EDITOR = ToolSpec(
    "file_editor",
    "Look at and change files. Paths are absolute (e.g. /testbed/pkg/module.py).\n"
    "* view: a file as numbered lines, or a directory as a tree two levels deep.\n"
    "* create: write a new file; an existing file is never overwritten.\n"
    "* str_replace: replace `old_str` with `new_str`; `old_str` must occur exactly once in the file, so include\n"
    "  enough surrounding lines to make it unique, with the exact indentation.\n"
    "* insert: add `new_str` after line `insert_line` (0 puts it at the top).\n"
    "* undo_edit: take back the last edit made to `path`.",
    (
        Param(
            "command",
            "one of view, create, str_replace, insert, undo_edit",
            True,
            ("view", "create", "str_replace", "insert", "undo_edit"),
        ),
        Param("path", "absolute path of the file or directory", True),
        Param("file_text", "content of the new file (create)", exact=True),
        Param("old_str", "the exact text to replace (str_replace)", exact=True),
        Param("new_str", "the replacement (str_replace) or the text to add (insert)", exact=True),
        Param("insert_line", "line number after which `new_str` goes (insert)", json_type="integer"),
        Param(
            "view_range",
            "lines to show, e.g. [10, 40]; -1 as the end means to the end of the file (view)",
            json_type="array",
        ),
        Param("concise", "true to fold long function bodies in a Python file view (view)", json_type="boolean"),
    ),
    read_only=("view",),
)

EXECUTE_BASH = ToolSpec(
    "execute_bash",
    "Run a bash command in the repository and see its output and exit code. Long outputs show only their first\n"
    "and last lines. Commands that wait for input, start background servers or use git are refused; a command\n"
    "that runs too long is stopped.",
    (Param("cmd", "the bash command line to run", True),),
)

SEARCH = ToolSpec(
    "search",
    "Find a plain text in the files of a directory (listing the files and match counts) or in one file (listing\n"
    "the matching lines with their numbers).",
    (
        Param("search_term", "the text to look for", True),
        Param("path", "the directory or file to search; the repository when omitted"),
    ),
    read_only=True,
)

FINISH = ToolSpec(
    "finish",
    "End the task once the fix is made and checked. The changes in the repository are what gets submitted.",
    (
        Param("command", "always `submit`", True, ("submit",)),
        Param("result", "a short summary of the change (optional)"),
    ),
    read_only=True,
)

TOOLS: dict[str, ToolSpec] = {t.name: t for t in (FILE_EDITOR, EXECUTE_BASH, SEARCH, FINISH)}
