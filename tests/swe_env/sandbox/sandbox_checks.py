"""Checks every sandbox backend must pass, shared by the per-backend test files."""

from __future__ import annotations

import subprocess
import time

from swe_env.sandbox.base import Sandbox
from swe_env.tools import TOOL_NAMES

NET_PROBE = "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3); print('CONNECTED')\""


def host_processes(marker: str) -> list[str]:
    """Command lines of host processes that mention marker (other than this ps)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if marker in line and not line.startswith("ps ")]


def check_basics(sb: Sandbox) -> None:
    res = sb.execute("pwd && git rev-parse --is-inside-work-tree")
    assert res.returncode == 0 and not res.timed_out
    assert res.output.splitlines() == [sb.workdir, "true"]
    assert sb.execute("exit 3").returncode == 3
    assert "to-stderr" in sb.execute("echo to-stderr >&2").output


def check_tools(sb: Sandbox) -> None:
    listed = sb.execute(f"ls {sb.tools_dir}").output.split()
    assert sorted(listed) == sorted(TOOL_NAMES)
    assert sb.execute("command -v file_editor").output.strip() == f"{sb.tools_dir}/file_editor"
    res = sb.execute(f"file_editor --command=view --path={sb.workdir}")
    assert res.returncode == 0, res.output
    assert "tests" in res.output


def check_network_off(sb: Sandbox) -> None:
    res = sb.execute(NET_PROBE, timeout=30)
    assert res.returncode != 0 and "CONNECTED" not in res.output
    assert "unreachable" in res.output.lower() or "error" in res.output.lower()


def check_timeout_keeps_sandbox(sb: Sandbox) -> None:
    start = time.monotonic()
    res = sb.execute("echo started; sleep 60", timeout=1)
    assert res.timed_out and res.returncode == -1
    assert "started" in res.output
    assert time.monotonic() - start < 20
    after = sb.execute("echo alive")
    assert after.output == "alive\n" and after.returncode == 0


def check_files_and_patch(sb: Sandbox) -> None:
    sb.write_file("notes/new_file.txt", "hello\n")
    assert sb.read_file(f"{sb.workdir}/notes/new_file.txt") == "hello\n"
    assert sb.execute("cat notes/new_file.txt").output == "hello\n"
    first = sb.execute("git ls-files | head -1").output.strip()
    sb.execute(f"echo appended >> {first}")
    sb.execute("python3 -m compileall -q . && mkdir -p pkg/__pycache__ && echo x > pkg/__pycache__/m.pyc")
    patch = sb.get_patch()
    assert ".pyc" not in patch and "__pycache__" not in patch
    assert "diff --git a/notes/new_file.txt b/notes/new_file.txt" in patch
    assert f"diff --git a/{first} b/{first}" in patch and "+appended" in patch


def forgotten_sandbox_output(backend: str) -> str:
    """Run a Python process that opens a sandbox and exits without closing it; return what it printed."""
    import sys
    from pathlib import Path

    code = (
        "from swe_env.sandbox.factory import open_sandbox, SandboxConfig\n"
        "from tasks import get_task\n"
        f"sb = open_sandbox(get_task('nexus-demo__semver-lite-1'), {backend!r}, SandboxConfig(install_tools=False))\n"
        "print(sb.container.id if hasattr(sb, 'container') else sb.repo.parent)\n"
    )
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()
