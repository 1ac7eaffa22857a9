"""The layout's rules: the command line imports what a command needs only when it runs (no torch for help, listings
or errors), the packages below the CLI never import it, every registered command loads, and the entry point leaves
the caller's signal handlers as it found them."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clilib import ROOT, cli_env

from cli import app as cli_app

LIBRARY = ("kvstore", "agent", "swe_env", "tasks", "pipeline", "benchmarks", "server")
PROBE = (
    "import sys\n"
    "sys.argv = ['nexus-agent'] + sys.argv[1:]\n"
    "from cli.app import main\n"
    "try:\n    main()\n"
    "except SystemExit:\n    pass\n"
    "print('OPENAI' if 'openai' in sys.modules else 'NO-OPENAI', file=sys.stderr)\n"
    "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)\n"
)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["bench", "--help"],
        ["tasks", "list"],
        ["solve", "no-such-task"],
        ["solve", "--help"],
        ["chat", "--help"],
        ["nope"],
        ["show", "no-such-run"],
        ["tasks", "list", "--json"],
    ],
)
def test_help_listings_and_errors_do_not_import_torch(args: list[str], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=cli_env(tmp_path), cwd=tmp_path
    )
    assert proc.stderr.strip().endswith("NO-TORCH"), proc.stderr[-2000:]
    assert "NO-OPENAI" in proc.stderr.splitlines(), proc.stderr[-2000:]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", LIBRARY)
def test_packages_below_the_cli_never_import_it(package: str) -> None:
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py") if "cli" in _imports(p)]
    assert offenders == []


@pytest.mark.parametrize(
    "name,target", [*cli_app.COMMANDS.items(), *(("bench " + k, v) for k, v in cli_app.BENCH_COMMANDS.items())]
)
def test_every_registered_command_loads(name: str, target: tuple[str, str]) -> None:
    command = cli_app.load_command(name.split()[-1], target[0])
    assert command.name == name.split()[-1] and target[1]
    # help paragraphs carry no source line breaks (an 80-column terminal showed each as a short line)
    for para in (command.help or "").split("\n\n"):
        if not para.startswith("\b"):
            assert all(cli_app._LIST_ITEM.match(line) for line in para.splitlines()[1:]), para


def test_unwrap_joins_lines_and_keeps_lists_and_verbatim_paragraphs() -> None:
    text = "First line\n    goes on.\n\n    Items:\n    - one\n      more\n    1. two\n\n    \b\n    a\n    b"
    assert cli_app.unwrap(text) == "First line goes on.\n\nItems:\n- one more\n1. two\n\n\b\na\nb"


def test_the_entry_point_restores_the_sigterm_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(sys, "argv", ["nexus-agent", "--help"])
    with pytest.raises(SystemExit):
        cli_app.main()
    assert signal.getsignal(signal.SIGTERM) is before
