"""The `nexus-agent` command: one typer app; each command lives in its own module and registers itself here."""

from __future__ import annotations

import typer

from cli import errors

app = typer.Typer(
    name="nexus-agent",
    help="A long-running coding-agent runtime with persistent, evicting KV memory (Nexus Sampling).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks of the evicting KV cache: overhead, turns, quality, speed, gpu.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

# Each module below adds its command(s) to `app` or `bench_app` when imported (one command per file).
_COMMAND_MODULES = [
    "cli.bench.overhead",
    "cli.tasks_cmd",
    "cli.env_cmd",
    "cli.grade_cmd",
    "cli.bench.gpu",
    "cli.bench.quality",
    "cli.bench.speed",
    "cli.solve_cmd",
    "cli.eval_cmd",
    "cli.chat_cmd",
    "cli.bench.turns",
]


def _register() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(name)


def main() -> None:
    """Console-script entry point: user errors print one line and exit 2, never a traceback."""
    import signal
    import sys

    # SIGTERM unwinds like Ctrl-C does (finally blocks and atexit run: sandboxes close, trajectories are flushed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _register()
    errors.run(app)
