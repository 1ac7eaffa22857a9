"""Every command's and subcommand's `--help` (bench's included) imports no heavy module: each command module keeps
its options apart from the code it runs (benchmarks/commands.py for bench), so help costs about what typer does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from clilib import cli_env

HEAVY = ("torch", "transformers", "openai", "docker", "ray", "matplotlib", "uvicorn")
# All help pages in one interpreter: a group's subcommands are listed from the loaded group, and a heavy module any
# page imports stays in sys.modules, so the last line names every heavy module some page imported.
PROBE = """
import json, sys
from cli import app as cli_app

def paths():
    yield []
    for registry, prefix in ((cli_app.COMMANDS, []), (cli_app.BENCH_COMMANDS, ["bench"])):
        for name, (target, _) in registry.items():
            if prefix + [name] in SKIP:
                continue
            yield prefix + [name]
            command = cli_app.load_command(name, target)
            if hasattr(command, 'commands'):  # a group (typer vendors its own click)
                yield from (prefix + [name, sub] for sub in command.commands)

SKIP, HEAVY = json.loads(sys.argv[1]), json.loads(sys.argv[2])
done = []
for path in paths():
    sys.argv = ["nexus-agent", *path, "--help"]
    try:
        cli_app.main()
    except SystemExit:
        pass
    done.append(path)
print(json.dumps({"pages": done, "heavy": [m for m in HEAVY if m in sys.modules]}), file=sys.stderr)
"""


def _help_pages(tmp_path: Path, skip: list[list[str]]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(skip), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=cli_env(tmp_path),
        cwd=tmp_path,
    )
    return json.loads(proc.stderr.strip().splitlines()[-1])


def test_every_help_page_imports_no_heavy_module(tmp_path: Path) -> None:
    result = _help_pages(tmp_path, skip=[])
    assert result["heavy"] == []


def test_the_probe_saw_every_command_and_subcommand(tmp_path: Path) -> None:
    pages = _help_pages(tmp_path, skip=[])["pages"]
    assert {("tasks", "list"), ("env", "status"), ("bench", "gpu"), ("bench", "replay"), ("solve",)} <= {
        tuple(p) for p in pages
    }
