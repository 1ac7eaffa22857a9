"""Turn the errors a user can cause into one clear line (exit 2) instead of a traceback."""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

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


def run(app: typer.Typer) -> None:
    try:
        app(standalone_mode=True)
    except Interrupted as exc:
        _err.print(f"[yellow]{escape(str(exc))}[/yellow]", highlight=False, soft_wrap=True)
        sys.exit(130)
    except KeyboardInterrupt:
        _err.print("[yellow]interrupted[/yellow]")
        sys.exit(130)
    except SystemExit as exc:  # typer turns Ctrl-C inside a command into a silent exit 130
        if exc.code == 130:
            _err.print("[yellow]interrupted[/yellow]")
        raise
    except user_error_types() as exc:
        message = " ".join(_worded(exc).split())  # one line, whatever the message holds; never wrapped by the console
        _err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
        sys.exit(2)
