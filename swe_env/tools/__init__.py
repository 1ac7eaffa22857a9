"""The agent's tools: stdlib-only programs that sandboxes install as executables `<tools_dir>/<name>`.

Each tool is one self-contained file in this package (`file_editor.py`, `execute_bash.py`, `search.py`,
`finish.py`), copied into the sandbox without its `.py` suffix and run with `--param value` arguments.
"""

from __future__ import annotations

import shlex
from pathlib import Path

TOOL_NAMES = ("file_editor", "execute_bash", "search", "finish")
SUBMIT_MARKER = "<<<NEXUS_SUBMITTED>>>"  # the line `finish` prints first; must equal finish.MARKER


def tool_sources() -> dict[str, Path]:
    """Tool name -> the Python source file in this package that the sandbox installs as `<tools_dir>/<name>`."""
    here = Path(__file__).resolve().parent
    return {name: here / f"{name}.py" for name in TOOL_NAMES}


def install_tools(tools_dir: Path) -> dict[str, Path]:
    """Copy every tool into `tools_dir` as an executable named without `.py`; returns name -> installed path."""
    tools_dir.mkdir(parents=True, exist_ok=True)
    installed = {}
    for name, source in tool_sources().items():
        target = tools_dir / name
        target.write_bytes(source.read_bytes())
        target.chmod(0o755)
        installed[name] = target
    return installed


def command_for(name: str, params: dict[str, str], tools_dir: str, python: str | None = None) -> str:
    """A bash command line running the tool `name` from `tools_dir` with each parameter as `--key=value`.

    Every argument is shell-quoted, so multi-line values and values starting with "-" arrive unchanged.
    `python`: an interpreter (>= 3.8) to run the tool with, for images whose `python3` on PATH is older;
    by default the tool's `#!/usr/bin/env python3` line decides.
    """
    if name not in TOOL_NAMES:
        raise ValueError(f"Unknown tool {name!r}; the tools are: {', '.join(TOOL_NAMES)}.")
    parts = [shlex.quote(python)] if python else []
    parts.append(shlex.quote(f"{tools_dir.rstrip('/')}/{name}"))
    parts += [shlex.quote(f"--{key}={value}") for key, value in params.items()]
    return " ".join(parts)
