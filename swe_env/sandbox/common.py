"""Pieces the sandbox backends share: running a host process with a timeout, the tools folder, the repo copy."""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import subprocess
import tempfile
import weakref
from pathlib import Path

from swe_env.sandbox.base import ExecResult, SandboxError
from tasks.schema import Task

DEFAULT_WORKDIR = "/testbed"
DEFAULT_TOOLS_DIR = "/opt/nexus-tools"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_OPEN: weakref.WeakSet = weakref.WeakSet()


def track(sandbox: object) -> None:
    """Close `sandbox` at interpreter exit if its owner never did (the safety net under the context manager)."""
    _OPEN.add(sandbox)


@atexit.register
def _close_open_sandboxes() -> None:
    for sandbox in list(_OPEN):
        sandbox.close()


def run_process(
    argv: list[str], timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None
) -> ExecResult:
    """Run argv in its own process group; on timeout kill the whole group and return what it printed so far."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return ExecResult(_decode(out), proc.returncode)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        return ExecResult(_decode(out), -1, timed_out=True)
    except BaseException:  # Ctrl-C while waiting: leave nothing running
        kill_group(proc)
        proc.wait()
        raise


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


# Byte-code is never part of a change (a binary hunk would also make the patch unappliable without --binary).
PATCH_EXCLUDES = ("*.pyc", "**/__pycache__/**")
# What every backend sets for commands: no byte-code files in the repo, UTF-8 output.
COMMAND_ENV = {"LANG": "C.UTF-8", "TERM": "dumb", "PYTHONDONTWRITEBYTECODE": "1"}


def patch_command(base_commit: str) -> str:
    """The shell command that prints the repo's change against the base commit, new files included."""
    excludes = " ".join(shlex.quote(f":(exclude,glob){p}") for p in PATCH_EXCLUDES)
    return f"git add -A && git diff --cached {shlex.quote(base_commit)} -- . {excludes}"


def install_tools(dest: Path) -> Path:
    """Put the agent tool programs into dest (executables named after the tools); return dest."""
    from swe_env.tools import install_tools as _install

    _install(dest)
    return dest


def make_workspace(prefix: str) -> Path:
    """A fresh private temp dir for one sandbox (repo copy, tools, /tmp)."""
    return Path(tempfile.mkdtemp(prefix=f"nexus-{prefix}-"))


def prepare_repo(task: Task, dest: Path, repo_cache: Path | None) -> Path:
    """The task's repo as a git working copy at its base commit (the tasks package knows how to get it)."""
    from tasks.repos import prepare_repo as _prepare

    repo = _prepare(task, dest, repo_cache=repo_cache)
    if not (Path(repo) / ".git").exists():
        raise SandboxError(f"task {task.instance_id}: {repo} is not a git working copy")
    return Path(repo)


def rewrite_path(path: str, workdir: str, mounts: dict[str, Path]) -> Path | None:
    """Map a path seen inside the sandbox (absolute, or relative to workdir) to the host path behind it, if any."""
    inner = Path(path) if path.startswith("/") else Path(workdir) / path
    for prefix, host in mounts.items():
        try:
            rel = inner.relative_to(prefix)
        except ValueError:
            continue
        return host / rel
    return None
