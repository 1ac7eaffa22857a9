"""Pieces the sandbox backends share: running a host process with a timeout, the tools folder, the repo copy."""

from __future__ import annotations

import atexit
import os
import select
import shlex
import signal
import subprocess
import time
import weakref
from pathlib import Path

from swe_env.safegit import SANDBOX_FLAGS
from swe_env.sandbox.base import ExecResult, SandboxError
from swe_env.sandbox.limits import StepCgroup, StepLimits
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


ARG_MAX_BYTES = 100_000  # a longer command is not passed as one argv string (Linux caps one at 128 KiB)


def fits_in_argv(cmd: str) -> bool:
    return len(cmd.encode("utf-8", errors="surrogateescape")) <= ARG_MAX_BYTES


def refuse_command(cmd: str) -> ExecResult | None:
    """The answer for a command no shell can run (a NUL byte), instead of an exception; None when it can run."""
    if "\0" in cmd:
        return ExecResult("The command contains a NUL byte (\\0), which no shell command can hold; remove it.", 2)
    return None


def run_process(
    argv: list[str],
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    limits: StepLimits | None = None,
    cgroup: StepCgroup | None = None,
    pass_fds: tuple[int, ...] = (),
) -> ExecResult:
    """Run argv in its own process group; stop it at the timeout or once it printed `limits.output_bytes`.

    The host never holds more than the output cap of a command's output: past it the group (and the step's
    cgroup) is killed and the result says so. On a timeout the result holds what was printed so far.
    """
    cap = (limits or StepLimits()).output_bytes
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, pass_fds=pass_fds,
        )  # fmt: skip
    except BaseException:
        if cgroup is not None:
            cgroup.destroy()
        raise
    try:
        out, stopped = _read_capped(proc, time.monotonic() + timeout, cap)
        if stopped is None:
            try:
                proc.wait(timeout=max(0.1, timeout))
            except subprocess.TimeoutExpired:
                stopped = "timeout"
        if stopped is not None:
            kill_group(proc)
            proc.wait()
        return _result(out, proc.returncode, stopped, cap, cgroup, limits)
    except BaseException:  # Ctrl-C while waiting: leave nothing running
        kill_group(proc)
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        if cgroup is not None:
            cgroup.destroy()


def _read_capped(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[bytes, str | None]:
    """Read the process's output to its end; stop early at the deadline ("timeout") or past `cap` ("output")."""
    fd = proc.stdout.fileno()
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(buf), "timeout"
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return bytes(buf), None
        buf += chunk
        if len(buf) > cap:
            return bytes(buf[:cap]), "output"


def _result(out: bytes, code: int, stopped: str | None, cap: int, cgroup, limits) -> ExecResult:
    text = _decode(out)
    if cgroup is not None and cgroup.memory_exhausted():
        mem = limits.memory_mb if limits is not None else None
        text += f"\n[the command ran out of memory (limit {mem} MiB per command): a process was killed]\n"
    if stopped == "output":
        note = f"\n[output cut at {cap} bytes: the command printed more than that and was stopped]\n"
        return ExecResult(text + note, -1, output_capped=True)
    if stopped == "timeout":
        return ExecResult(text, -1, timed_out=True)
    return ExecResult(text, code)


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
    git = f"git {SANDBOX_FLAGS}"
    return f"{git} add -A && {git} diff --cached --no-ext-diff --no-textconv {shlex.quote(base_commit)} -- . {excludes}"


def install_tools(dest: Path) -> Path:
    """Put the agent tool programs into dest (executables named after the tools); return dest."""
    from swe_env.tools import install_tools as _install

    _install(dest)
    return dest


def make_workspace(prefix: str) -> Path:
    """A fresh private temp dir for one sandbox (repo copy, tools, /tmp), tagged with its owner so that a start-up
    sweep reclaims it if this process is killed before it can remove it."""
    from swe_env.sandbox.owners import make_owned_dir

    return make_owned_dir(prefix)


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
