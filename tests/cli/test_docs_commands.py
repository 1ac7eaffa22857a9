"""The commands the docs show exist as written: every `nexus-agent ...` line of a fenced bash block in README.md and
docs/*.md is resolved against the real command tree (each subcommand must exist) and parsed by that command (each
option it names must be one of its options), and its --help runs; scripts the blocks run must exist. Nothing is run
for real (GPU, network and long runs alike), so every line is checked; EXCEPTIONS lists those that cannot be."""

from __future__ import annotations

import re
import shlex
from typing import Any

import click
import pytest
import typer
from clilib import ROOT
from typer._click import exceptions as typer_click_errors  # typer 0.29 runs a click of its own
from typer.testing import CliRunner

from cli.app import app

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# (file, start of the command line) -> why it is not checked. None today: nothing is run for real, so the lines that
# need a GPU (bench gpu, serve --model deepswe-preview), the network (a hub dataset) or hours (bench replay) are
# parsed like any other; a line that cannot even be parsed (an option a plugin adds, say) goes here with its reason.
EXCEPTIONS: dict[tuple[str, str], str] = {}
_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
_SEPARATORS = {"&&", "||", ";", "|", "&"}
NO_SUCH_OPTION = (click.NoSuchOption, typer_click_errors.NoSuchOption)  # bench gpu is a plain click command
USAGE_ERRORS = (click.UsageError, typer_click_errors.UsageError)


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of the fenced bash blocks in `text`, as words (line continuations joined, comments
    dropped, split at && || ; | &, leading VAR=value assignments and `$(` substitutions left out)."""
    commands: list[list[str]] = []
    for block in _BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split, lexer.commenters = True, "#"
            words: list[str] = []
            for word in lexer:
                if word in _SEPARATORS:
                    commands.append(words)
                    words = []
                else:
                    words.append(word)
            commands.append(words)
    return [_without_assignments(c) for c in commands if _without_assignments(c)]


def _without_assignments(words: list[str]) -> list[str]:
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    return words


def documented() -> list[tuple[str, list[str]]]:
    """(doc file, words after `nexus-agent`) for every documented nexus-agent command."""
    found = []
    for doc in DOCS:
        for words in shell_commands(doc.read_text(encoding="utf-8")):
            if words[0] == "nexus-agent":
                found.append((doc.name, words[1:]))
    return found


def _is_group(command: Any) -> bool:
    return hasattr(command, "list_commands")


def resolve(args: list[str]) -> tuple[list[str], Any, list[str]]:
    """(command path, the command, its own arguments) of `args` in the real app; AssertionError on an unknown
    subcommand."""
    command = typer.main.get_command(app)
    path: list[str] = []
    ctx = command.context_class(command, info_name="nexus-agent")
    while _is_group(command) and args and not args[0].startswith("-"):
        sub = command.get_command(ctx, args[0])
        assert sub is not None, f"no command {' '.join([*path, args[0]])!r}"
        path.append(args[0])
        command, args = sub, args[1:]
        ctx = command.context_class(command, info_name=path[-1], parent=ctx)
    return path, command, args


def check_options(path: list[str], command: Any, args: list[str]) -> None:
    """Parse `args` with `command` as the CLI would; NoSuchOption for an option the command lacks, which the parser
    raises before it converts any value (a placeholder such as N, DIR or ... then fails to convert, or is an extra
    argument: only names are checked)."""
    if _is_group(command):  # a group named alone (`nexus-agent tasks`): its subcommand follows
        return
    try:
        command.make_context(" ".join(path), list(args))
    except NO_SUCH_OPTION:
        raise
    except USAGE_ERRORS:
        pass


COMMANDS = documented()


def test_the_docs_show_commands_to_check() -> None:
    assert len(COMMANDS) >= 30 and {"README.md", "benchmarks.md", "server.md"} <= {doc for doc, _ in COMMANDS}


@pytest.mark.parametrize("doc, args", COMMANDS, ids=[f"{d}:{' '.join(a)[:60]}" for d, a in COMMANDS])
def test_a_documented_command_and_its_options_exist(doc: str, args: list[str]) -> None:
    line = " ".join(["nexus-agent", *args])
    if any(doc == d and line.startswith(start) for d, start in EXCEPTIONS):
        pytest.skip(next(why for (d, start), why in EXCEPTIONS.items() if d == doc and line.startswith(start)))
    path, command, rest = resolve(args)
    try:
        check_options(path, command, rest)
    except NO_SUCH_OPTION as exc:
        pytest.fail(f"{doc}: `{line}`: {exc.format_message()}")
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output


def test_scripts_the_docs_run_exist() -> None:
    missing = []
    for doc in [*DOCS, ROOT / "CONTRIBUTING.md"]:
        for words in shell_commands(doc.read_text(encoding="utf-8")):
            missing += [f"{doc.name}: {w}" for w in words if w.startswith("scripts/") and not (ROOT / w).exists()]
    assert missing == []


def test_the_checker_catches_what_it_must() -> None:
    block = "```bash\nA=1 nexus-agent eval --workers 8 \\\n  --out x  # a comment\nnexus-agent tasks list | cat\n```\n"
    assert shell_commands(block) == [["nexus-agent", "eval", "--workers", "8", "--out", "x"],
                                     ["nexus-agent", "tasks", "list"], ["cat"]]  # fmt: skip
    with pytest.raises(AssertionError, match="no command 'nosuch'"):
        resolve(["nosuch"])
    with pytest.raises(NO_SUCH_OPTION):
        check_options(*resolve(["eval", "--out", "x", "--no-such-option", "1"]))
    check_options(*resolve(["bench", "replay", "$T", "--learn", "N", "..."]))  # placeholders are not names
