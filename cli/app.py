"""The `nexus-agent` command: a typer app whose commands are registered by module name and imported on use.

`nexus-agent --help`, `tasks list` and every error path import only what they need: the listing below carries each
command's one-line help, so no command module (and no torch) is imported until that command runs.
"""

from __future__ import annotations

import importlib
import inspect
import re

import click
import typer
from typer.core import TyperGroup

from cli import errors
from cli.console import quiet_progress_bars
from cli.ctrl_c import waiting_for_imports

# name -> ("module:attribute", one-line help). The attribute is a command function, a typer.Typer (a group) or a
# click.Command.
COMMANDS: dict[str, tuple[str, str]] = {
    "solve": ("cli.solve_cmd:solve_cmd", "One task end to end: sandbox, agent (live view), patch, grading, files."),
    "eval": ("cli.eval_cmd:eval_cmd", "Solve and grade many tasks (process pool or Ray), resumable; SWE-bench files."),
    "chat": ("cli.chat_cmd:chat_cmd", "Interactive coding session on a local repo; its KV memory persists (--resume)."),
    "show": ("cli.show_cmd:show_cmd", "A run afterwards: task, model, memory, result, then each step and its cache."),
    "grade": ("cli.grade_cmd:grade_cmd", "Grade one patch (a file, gold or empty) like SWE-bench in a fresh sandbox."),
    "tasks": ("cli.tasks_cmd:tasks_app", "Browse tasks: built-in, a local JSON/JSONL/parquet file, or a HF dataset."),
    "serve": ("cli.serve_cmd:serve_cmd", "Serve one model to many agent sessions (OpenAI API, batched, evicting)."),
    "calibrate": ("cli.calibrate_cmd:calibrate_cmd", "Memory profile: what agent replies need of a fixed prompt."),
    "profiles": ("cli.profiles_cmd:profiles_cmd", "Memory profiles: the store, the shipped ones, a folder."),
    "env": ("cli.env_cmd:env_app", "Sandbox environments: build the offline docker images, prune leftovers, status."),
}
BENCH_COMMANDS: dict[str, tuple[str, str]] = {
    "overhead": ("benchmarks.commands:overhead", "Every policy's eviction step and statistics beside a decode step."),
    "turns": ("benchmarks.commands:turns_cmd", "Multi-turn session: true eviction vs re-prefill vs full cache."),
    "quality": ("benchmarks.commands:quality", "Accuracy of every policy at several densities on retrieval tasks."),
    "speed": ("benchmarks.commands:speed", "Decode throughput, latency and memory: nexus vs full cache."),
    "decode": (
        "benchmarks.commands:decode_cmd",
        "Decode tokens/s by policy and KV engine, batch 1 and N, vs the bound.",
    ),
    "replay": ("benchmarks.commands:replay", "Replay recorded agent conversations: each memory's fidelity to full."),
    "reservoir": ("benchmarks.commands:reservoir_cmd", "Reservoir vs top-K at the real Nexus weight scale."),
    "serve": (
        "benchmarks.commands:serve_bench",
        "N concurrent agent sessions on one server: batched vs serial, KV fit.",
    ),
    "gpu": ("benchmarks.gpu:gpu", "The GPU benchmark (Qwen3-8B shapes, Triton kernel); --quick on the CPU."),
}


def load_command(name: str, target: str) -> click.Command:
    """Import `module:attribute` and turn it into a click command named `name`."""
    module, attribute = target.split(":")
    obj = getattr(importlib.import_module(module), attribute)
    if isinstance(obj, click.Command):  # a command that parses its own arguments (bench gpu)
        unwrap_help(obj)
        return obj
    if not isinstance(obj, typer.Typer):
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(name)(obj)
        obj = single
    command = typer.main.get_command(obj)
    command.name = name
    unwrap_help(command)
    return command


def _flag_type(option: typer.core.TyperOption, ctx: click.Context) -> str | None:
    """The type column of --help: nothing for a flag (it takes no value; typer showed `<bool>`)."""
    return "" if option.is_flag else _TYPE_OF(option, ctx)


_TYPE_OF = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_type  # every command's help, --help and --version included


def unwrap_help(command: click.Command) -> None:
    """Join the hard line breaks of docstring paragraphs (this typer keeps them, so an 80-column terminal showed
    every source line as a short line), for the command and every subcommand of a group."""
    if command.help:
        command.help = unwrap(command.help)
    for sub in getattr(command, "commands", {}).values():
        unwrap_help(sub)


def unwrap(text: str) -> str:
    """Paragraphs (split at blank lines) with their lines joined by spaces; a line that starts a list item
    ('- ', '* ', '1. ') or a paragraph that starts with click's no-rewrap marker (\\b) keeps its line breaks."""
    paragraphs = []
    for para in inspect.cleandoc(text).split("\n\n"):
        if para.startswith("\b"):
            paragraphs.append(para)
            continue
        lines: list[str] = []
        for line in para.splitlines():
            item = _LIST_ITEM.match(line)
            if lines and not item:
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


_LIST_ITEM = re.compile(r"\s*([-*]|\d+[.)])\s")


class LazyGroup(TyperGroup):
    """A group whose commands come from a registry; listing them (help) imports nothing."""

    registry: dict[str, tuple[str, str]] = {}
    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *self.registry]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.registry:
            return super().get_command(ctx, cmd_name)
        target, short = self.registry[cmd_name]
        if self._listing:  # help output: a stand-in carrying the one-line help
            return click.Command(cmd_name, help=short, short_help=short)
        return load_command(cmd_name, target)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


class RootGroup(LazyGroup):
    registry = COMMANDS

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except errors.ClickException as exc:  # a command's usage error: click says it on stderr and exits 2
            errors.usage_error_json(exc)
            raise


class BenchGroup(LazyGroup):
    registry = BENCH_COMMANDS


app = typer.Typer(
    name="nexus-agent",
    help="A long-running coding-agent runtime with persistent, evicting KV memory (Nexus Sampling).",
    cls=RootGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(
    cls=BenchGroup, help="Benchmarks of the evicting KV cache (see docs/benchmarks.md).", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")


def _print_version(given: bool) -> None:
    if given:
        # lazy: importlib.metadata (+35 modules), only for --version
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"nexus-agent {version('nexus-agent')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            typer.echo("nexus-agent (not installed: no version)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """A long-running coding-agent runtime with persistent, evicting KV memory (Nexus Sampling)."""


def main() -> None:
    """Console-script entry point: user errors print one line and exit 2, Ctrl-C `interrupted` and exit 130, SIGTERM
    `terminated` and exit 143, never a traceback; a Ctrl-C pressed while a module imports (torch, transformers:
    seconds at the start of most commands) waits for the import to end (cli.ctrl_c)."""

    quiet_progress_bars()
    # SIGTERM unwinds as Ctrl-C does (a trajectory's footer, a chat turn rolled back, sandboxes closed), then exits
    # 143; the previous handlers come back afterwards, so an in-process caller (a test) keeps its own.
    with waiting_for_imports():
        errors.run(app)
