"""Turn the errors a user can cause into one clear line (exit 2) instead of a traceback, Ctrl-C into `interrupted`
(exit 130) and SIGTERM into `terminated` (exit 143). Under a command's `--json` flag (`json_flag`) each of them also
prints one JSON object on stdout, where the command's result would have been:

    {"error": {"type": "usage" | "input" | "interrupted", "message": "...", "exit_code": 2 | 130 | 143}}

usage: the command line is wrong (an unknown option, a bad value, a missing argument: click's message); input: the
command refused what it was given or found (a task id, a file, a setting, no Docker daemon); interrupted: Ctrl-C or
SIGTERM.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

try:  # typer 0.29 runs a click of its own
    from typer._click.exceptions import ClickException
except ImportError:  # earlier typers run click
    from click import ClickException

from cli.json_errors import error_json, json_in, stopped
from kvstore.errors import KVStoreError, NamesSetting
from server.errors import ServeError

_err = Console(stderr=True)


def user_error_types() -> tuple[type[BaseException], ...]:
    """The exception types that mean 'bad input or environment', collected from the packages that define them."""
    from swe_env.sandbox.base import SandboxError  # lazy: urllib, off --help
    from tasks.schema import TaskError  # lazy: urllib, off --help

    # No FileNotFoundError: a missing file the user named is reported where it is opened, as one of these; any
    # other is a bug and keeps its traceback.
    types: list[type[BaseException]] = [KVStoreError, ServeError, SandboxError, TaskError]
    try:
        from agent.errors import AgentError

        types.append(AgentError)
    except ImportError:
        pass
    return tuple(types)


class Interrupted(Exception):
    """Ctrl-C ended a command that says what it left (its message, one line) instead of the bare "interrupted"."""


def _worded(exc: BaseException) -> str:
    """The message of a user error, a bad setting named by its flag (`budget` -> `--budget`)."""

    if isinstance(exc, NamesSetting):
        from cli.options import flag_of  # lazy: cli.options (+20 modules), only on a setting error

        return f"{flag_of(exc.setting)} {exc.detail}"
    return str(exc)


class _Json:
    """Whether this run's command was given its --json flag (set by the flag when click reads it)."""

    given = False
    read = False  # click has read the flag (given or not); before that, the command line says


def json_flag(help: str) -> Any:
    """The `--json` flag of a command that prints its result as JSON on stdout; given, an error prints one JSON
    object there instead (the module's doc)."""
    said = f'{help} An error is {{"error": {{"type": ..., "message": ..., "exit_code": ...}}}}.'
    return typer.Option(False, "--json", help=said, callback=_note_json)


def _note_json(value: bool) -> bool:
    _Json.given, _Json.read = value, True
    return value


def _say_json(kind: str, message: str, exit_code: int) -> None:
    if _Json.given:
        typer.echo(error_json(kind, message, exit_code))


def usage_error_json(exc: ClickException) -> None:
    """A usage error as JSON on stdout (click then says it on stderr and exits 2), when the command line gives --json
    to a command that has the flag: click may stop at a bad value before it reads --json."""
    command = getattr(getattr(exc, "ctx", None), "command", None)
    flags = [p for p in getattr(command, "params", []) if getattr(p, "is_flag", False)]
    _Json.given = _Json.given or (json_in(sys.argv[1:]) and any("--json" in p.opts for p in flags))
    _say_json("usage", " ".join(exc.format_message().split()), exc.exit_code)


def _interrupted(exc: BaseException, message: str | None = None) -> None:
    """Say how Ctrl-C or SIGTERM (`exc` or an exception it led to) ended the command, and exit 130 or 143."""
    said, code = stopped(exc)
    message = message or said
    _err.print(f"[yellow]{escape(message)}[/yellow]", highlight=False, soft_wrap=True)
    if not _Json.read:  # stopped before click read the options
        _Json.given = json_in(sys.argv[1:])
    _say_json("interrupted", message, code)
    sys.exit(code)


def run(app: typer.Typer) -> None:
    _Json.given = _Json.read = False
    try:
        app(standalone_mode=True)
    except Interrupted as exc:
        _interrupted(exc, str(exc))
    except KeyboardInterrupt as exc:
        _interrupted(exc)
    except SystemExit as exc:  # typer turns Ctrl-C inside a command into a silent exit 130
        if exc.code == 130:
            _interrupted(exc)
        raise
    except user_error_types() as exc:
        message = " ".join(_worded(exc).split())  # one line, whatever the message holds; never wrapped by the console
        _err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
        _say_json("input", message, 2)
        sys.exit(2)
