"""Pieces the sandbox backends share: running a host process with a timeout, the tools folder, the repo copy."""

from __future__ import annotations

import atexit
import errno
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
from swe_env.sandbox.limits import DiskBudget, StepCgroup, StepLimits
from swe_env.sandbox.owners import make_owned_dir
from swe_env.tools import install_tools as _install
from tasks.repos import prepare_repo as _prepare
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


DISK_POLL_S = 1.0  # how often a running step's disk use is measured
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
    disk: DiskBudget | None = None,
) -> ExecResult:
    """Run argv in its own process group; stop it at the timeout, once it printed `limits.output_bytes`, or once the
    task went past its disk budget (checked about once a second and at the end).

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
        out, stopped = _read_capped(proc, time.monotonic() + timeout, cap, disk)
        if stopped is None:
            try:
                proc.wait(timeout=max(0.1, timeout))
            except subprocess.TimeoutExpired:
                stopped = "timeout"
        if stopped is not None:
            kill_group(proc)
            proc.wait()
        over = disk.exceeded() if disk is not None and disk.active else None
        return _result(out, proc.returncode, stopped, cap, cgroup, limits, over)
    except BaseException:  # Ctrl-C while waiting: leave nothing running
        kill_group(proc)
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        if cgroup is not None:
            cgroup.destroy()


def _read_capped(
    proc: subprocess.Popen, deadline: float, cap: int, disk: DiskBudget | None = None
) -> tuple[bytes, str | None]:
    """Read the process's output to its end; stop early at the deadline ("timeout"), past `cap` ("output") or past
    the disk budget ("disk", polled about once a second)."""
    fd = proc.stdout.fileno()
    buf = bytearray()
    next_poll = time.monotonic() + DISK_POLL_S
    while True:
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            return bytes(buf), "timeout"
        if disk is not None and disk.active and now >= next_poll:
            if disk.exceeded() is not None:
                return bytes(buf), "disk"
            next_poll = time.monotonic() + DISK_POLL_S
        ready, _, _ = select.select([fd], [], [], min(left, DISK_POLL_S))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return bytes(buf), None
        buf += chunk
        if len(buf) > cap:
            return bytes(buf[:cap]), "output"


def _result(out: bytes, code: int, stopped: str | None, cap: int, cgroup, limits, over: str | None) -> ExecResult:
    text = _decode(out)
    if over is not None:
        return disk_result(text, code, over, stopped == "disk")
    if cgroup is not None and cgroup.memory_exhausted():
        mem = limits.memory_mb if limits is not None else None
        text += f"\n[the command ran out of memory (limit {mem} MiB per command): a process was killed]\n"
    if stopped == "output":
        note = f"\n[output cut at {cap} bytes: the command printed more than that and was stopped]\n"
        return ExecResult(text + note, -1, output_capped=True)
    if stopped == "timeout":
        return ExecResult(text, -1, timed_out=True)
    return ExecResult(text, code)


def disk_result(text: str, code: int | None, over: str, stopped: bool) -> ExecResult:
    """The result of a step after which the task is past its disk budget (`stopped`: the step was killed for it)."""
    note = f"\n[the command was stopped: {over}]\n" if stopped else f"\n[{over}]\n"
    return ExecResult(text + note, -1 if stopped or code is None else code, disk_exceeded=over)


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

    _install(dest)
    return dest


def make_workspace(prefix: str) -> Path:
    """A fresh private temp dir for one sandbox (repo copy, tools, /tmp), tagged with its owner so that a start-up
    sweep reclaims it if this process is killed before it can remove it."""

    return make_owned_dir(prefix)


def prepare_repo(task: Task, dest: Path, repo_cache: Path | None) -> Path:
    """The task's repo as a git working copy at its base commit (the tasks package knows how to get it)."""

    repo = _prepare(task, dest, repo_cache=repo_cache)
    if not (Path(repo) / ".git").exists():
        raise SandboxError(f"task {task.instance_id}: {repo} is not a git working copy")
    return Path(repo)


def open_inside(path: str, workdir: str, mounts: dict[str, Path], flags: int, make_parents: bool = False) -> int:
    """Open, on the host, the file a sandbox path names, never leaving the mount it lies in: the agent may have
    planted symlinks (/testbed/x -> /etc), which a host-side read or write (as root) must not follow. The file
    itself is opened with O_NOFOLLOW; its folder must resolve inside the mount. Raises OSError."""
    inner = Path(path) if path.startswith("/") else Path(workdir) / path
    for prefix, host in mounts.items():
        try:
            rel = Path(os.path.normpath(inner)).relative_to(prefix)
        except ValueError:
            continue
        target = host / rel
        folder = target.parent
        if make_parents:
            _make_folders_inside(folder, host)
        if not Path(os.path.realpath(folder)).is_relative_to(os.path.realpath(host)):
            raise OSError(errno.EACCES, "the path leaves the sandbox (a symbolic link)")
        return os.open(target, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    raise OSError(errno.ENOENT, "not a path the host can see into")


def _make_folders_inside(folder: Path, root: Path) -> None:
    missing = []
    while not folder.exists() and folder != root:
        missing.append(folder)
        folder = folder.parent
    if not Path(os.path.realpath(folder)).is_relative_to(os.path.realpath(root)):
        raise OSError(errno.EACCES, "the path leaves the sandbox (a symbolic link)")
    for path in reversed(missing):
        os.mkdir(path)


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
