"""Per-step resource limits: what one sandbox command may use, and the cgroup that enforces it on the host.

Every isolating backend takes a `StepLimits`: docker maps it onto the container (pids, memory, CPUs) and the
host-side output reader; bubblewrap puts each command into a fresh cgroup when the caller may create one (root,
cgroup v2 or v1 with the pids and memory controllers) and always sets rlimits inside the sandbox. A process
limit by rlimit does not bind processes of host root (the kernel exempts uid 0), so as root the cgroup is what
stops a fork bomb; `StepCgroup.create` returns None where no cgroup can be made and the sandbox says so.
"""

from __future__ import annotations

import os
import shlex
import signal
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_PARENT = "nexus-agent"  # the cgroup (per hierarchy) holding every step's cgroup


@dataclass
class StepLimits:
    """What one command in a sandbox may use (and the disk a whole task may add); every field None means unlimited."""

    pids: int | None = 1024  # processes and threads alive at once
    memory_mb: int | None = 8192  # memory of the whole step (cgroup), else of each process (RLIMIT_AS)
    cpus: float | None = None  # CPU share (1.0 = one core) where a cgroup or docker enforces it
    cpu_s: int | None = 3600  # CPU seconds of each process (RLIMIT_CPU)
    file_mb: int | None = 4096  # largest file a process may write (RLIMIT_FSIZE)
    output_bytes: int = 32 << 20  # most output the host reads from one command; past it the command is killed
    disk_mb: int | None = 4096  # what a task may add to its repo and /tmp, all steps together (then the episode ends)
    inodes: int | None = 100_000  # files and folders a task may add there, all steps together

    def ulimit_prelude(self, by_rlimit: bool) -> str:
        """bash `ulimit` commands run before a sandboxed command (hard and soft limits: it cannot raise them).

        by_rlimit: no cgroup holds the step, so processes and memory are capped by rlimits too. RLIMIT_NPROC counts
        every process of the host user, not the step's: with a cgroup, pids.max is the step's own limit.
        """
        parts = []
        if self.pids is not None and by_rlimit:
            parts.append(f"-u {int(self.pids)}")
        if self.memory_mb is not None and by_rlimit:
            parts.append(f"-v {int(self.memory_mb) * 1024}")
        if self.cpu_s is not None:
            parts.append(f"-t {int(self.cpu_s)}")
        if self.file_mb is not None:
            parts.append(f"-f {int(self.file_mb) * 1024}")  # bash counts 1024-byte blocks (POSIX mode: 512)
        return "".join(f"ulimit {p} || exit 126; " for p in parts)


def scan(*roots: Path):
    """Every entry (os.DirEntry) below `roots`, never following a symlink; an unreadable folder is skipped."""
    stack = [str(r) for r in roots if r.exists()]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            yield entry
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
            except OSError:
                continue


@dataclass(frozen=True)
class DiskUsage:
    """Space and entries under some folders."""

    bytes: int
    inodes: int

    def __add__(self, other: DiskUsage) -> DiskUsage:
        return DiskUsage(self.bytes + other.bytes, self.inodes + other.inodes)

    @classmethod
    def of(cls, *roots: Path) -> DiskUsage:
        """Allocated bytes and entries under `roots` (symlinks not followed; a file linked twice counts twice)."""
        size = count = 0
        for entry in scan(*roots):
            try:
                size += entry.stat(follow_symlinks=False).st_blocks * 512
                count += 1
            except OSError:
                continue
        return cls(size, count)


class DiskBudget:
    """What a task may add to its writable folders over a whole episode, measured against their state at start.

    Checked after every step and, while a step runs, about once a second: a step that goes past it is stopped,
    and the sandbox says so in its result so that the episode ends with a clear reason. Writes between two polls
    can go past the budget by what the disk takes in that time (each file stays under the file-size limit).

    Walking a repo costs ~6 us an entry (45 ms for 7,000 files), so a check first reads the filesystems' used
    space and inodes (statvfs, microseconds) and walks only when they grew by a quarter of what is left of the
    budget since the last walk, or RECHECK_S passed. Space another process frees meanwhile can hide the task's
    growth from that first look for at most RECHECK_S.
    """

    RECHECK_S = 5.0

    def __init__(self, limits: StepLimits, measure, roots: tuple[Path, ...] = ()) -> None:
        self.limits = limits
        self.measure = measure  # () -> DiskUsage of the task's writable folders
        self.roots = roots  # folders on the filesystems those lie on (none: walk at every check)
        self.start = self.last = measure()
        self._seen_fs, self._seen_at = _fs_used(roots), time.monotonic()

    def exceeded(self) -> str | None:
        """Why the task is past its budget (None: it is not)."""
        if self._walk_needed():
            self.last = self.measure()
            self._seen_fs, self._seen_at = _fs_used(self.roots), time.monotonic()
        added_mb, added_inodes = (self.last.bytes - self.start.bytes) / (1 << 20), self.last.inodes - self.start.inodes
        if self.limits.disk_mb is not None and added_mb > self.limits.disk_mb:
            return f"the task's files grew by {added_mb:,.0f} MiB, past its disk budget of {self.limits.disk_mb:,} MiB"
        if self.limits.inodes is not None and added_inodes > self.limits.inodes:
            return f"the task added {added_inodes:,} files and folders, past its budget of {self.limits.inodes:,}"
        return None

    def _walk_needed(self) -> bool:
        if not self.roots or time.monotonic() - self._seen_at >= self.RECHECK_S:
            return True
        used = _fs_used(self.roots)
        grown_bytes, grown_inodes = used.bytes - self._seen_fs.bytes, used.inodes - self._seen_fs.inodes
        left_bytes = ((self.limits.disk_mb or 0) << 20) - (self.last.bytes - self.start.bytes)
        left_inodes = (self.limits.inodes or 0) - (self.last.inodes - self.start.inodes)
        return (self.limits.disk_mb is not None and grown_bytes * 4 >= left_bytes) or (
            self.limits.inodes is not None and grown_inodes * 4 >= left_inodes
        )

    @property
    def active(self) -> bool:
        return self.limits.disk_mb is not None or self.limits.inodes is not None


def held_deleted(pids: list[int], dev: int | None) -> DiskUsage:
    """Space of the deleted files on device `dev` (None: any) that these processes hold open (in no folder, so no
    walk sees them: issue 62 held 184 MiB so against a 40 MiB budget). Each file counted once."""
    seen: set[tuple[int, int]] = set()
    size = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if st.st_nlink == 0 and dev in (None, st.st_dev) and stat.S_ISREG(st.st_mode) and key not in seen:
                seen.add(key)
                size += st.st_blocks * 512
    return DiskUsage(size, len(seen))


def _fs_used(roots: tuple[Path, ...]) -> DiskUsage:
    """Used bytes and inodes of the filesystems `roots` lie on (each filesystem once)."""
    size = count = 0
    for root in {r.stat().st_dev: r for r in roots if r.exists()}.values():
        st = os.statvfs(root)
        size += (st.f_blocks - st.f_bfree) * st.f_frsize
        count += st.f_files - st.f_ffree
    return DiskUsage(size, count)


class StepCgroup:
    """A fresh cgroup for one command: processes and memory capped, everything in it killed at the end."""

    def __init__(self, dirs: list[Path], v2: bool) -> None:
        self.dirs = dirs  # one per hierarchy (v2: one; v1: pids, memory, cpu)
        self.v2 = v2

    @classmethod
    def create(cls, limits: StepLimits) -> StepCgroup | None:
        """A new step cgroup with `limits`, or None when this process cannot make one (not root, not mounted)."""
        if os.geteuid() != 0:
            return None
        name = f"step-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        _sweep_once()
        try:
            if (CGROUP_ROOT / "cgroup.controllers").is_file():
                return _create_v2(name, limits)
            return _create_v1(name, limits)
        except OSError:
            return None

    def enter_argv(self, argv: list[str]) -> list[str]:
        """argv run inside this cgroup: a shell moves itself in, then execs argv (so nothing escapes the move)."""
        moves = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs)
        return ["/bin/sh", "-c", f'{moves} && exec "$@"', "nexus-step", *argv]

    def procs(self) -> list[int]:
        """The processes in this cgroup now."""
        return sorted({pid for d in self.dirs for pid in _procs(d)})

    def memory_exhausted(self) -> bool:
        """Whether the kernel OOM-killed something in this cgroup."""
        for d in self.dirs:
            for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                try:
                    lines = (d / name).read_text().splitlines()
                except OSError:
                    continue
                counts = dict(line.split()[:2] for line in lines if len(line.split()) >= 2)
                if int(counts.get(key, "0")) > 0:
                    return True
        return False

    def destroy(self) -> None:
        """Kill every process left in the cgroup, then remove it."""
        deadline = time.monotonic() + 10
        for d in self.dirs:
            if self.v2:
                _write(d / "cgroup.kill", "1")
            while time.monotonic() < deadline:
                pids = _procs(d)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.02)
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy for a moment after the last process died
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


def _create_v2(name: str, limits: StepLimits) -> StepCgroup:
    """Under /sys/fs/cgroup/nexus-agent. The root must hand pids and memory down: enabling them there works on a
    host; inside a container whose cgroup holds processes it only works if they are enabled already."""
    wanted = {"pids", "memory"} | ({"cpu"} if limits.cpus else set())
    available = set((CGROUP_ROOT / "cgroup.controllers").read_text().split())
    _write(CGROUP_ROOT / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted & available))
    parent = CGROUP_ROOT / _PARENT
    parent.mkdir(exist_ok=True)
    handed_down = set((parent / "cgroup.controllers").read_text().split())
    if not {"pids", "memory"} <= handed_down:
        raise OSError("the pids and memory controllers are not available to child cgroups")
    _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted & handed_down), check=True)
    step = parent / name
    step.mkdir()
    group = StepCgroup([step], v2=True)
    try:
        if limits.pids is not None:
            _write(step / "pids.max", str(limits.pids), check=True)
        if limits.memory_mb is not None:
            _write(step / "memory.max", str(limits.memory_mb << 20), check=True)
            _write(step / "memory.swap.max", "0")
        if limits.cpus:
            _write(step / "cpu.max", f"{int(limits.cpus * 100000)} 100000")
    except OSError:
        group.destroy()
        raise
    return group


def _create_v1(name: str, limits: StepLimits) -> StepCgroup:
    if not (CGROUP_ROOT / "pids" / "cgroup.procs").is_file() or not (CGROUP_ROOT / "memory" / "cgroup.procs").is_file():
        raise OSError("no cgroup v1 pids and memory hierarchies")
    controllers = ["pids", "memory"] + (["cpu"] if limits.cpus and (CGROUP_ROOT / "cpu").is_dir() else [])
    dirs = []
    for c in controllers:
        (CGROUP_ROOT / c / _PARENT).mkdir(exist_ok=True)
        (CGROUP_ROOT / c / _PARENT / name).mkdir()
        dirs.append(CGROUP_ROOT / c / _PARENT / name)
    group = StepCgroup(dirs, v2=False)
    try:
        pids, memory = dirs[0], dirs[1]
        if limits.pids is not None:
            _write(pids / "pids.max", str(limits.pids), check=True)
        if limits.memory_mb is not None:
            _write(memory / "memory.limit_in_bytes", str(limits.memory_mb << 20), check=True)
            _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_mb << 20))
        if limits.cpus and len(dirs) > 2:
            _write(dirs[2] / "cpu.cfs_period_us", "100000")
            _write(dirs[2] / "cpu.cfs_quota_us", str(int(limits.cpus * 100000)))
    except OSError:
        group.destroy()
        raise
    return group


_swept = False


def _sweep_once() -> None:
    """Remove the step cgroups of processes killed before they could (empty once their processes are gone)."""
    global _swept
    if _swept:
        return
    _swept = True
    for parent in (CGROUP_ROOT / _PARENT, *(CGROUP_ROOT / c / _PARENT for c in ("pids", "memory", "cpu"))):
        for step in parent.glob("step-*-*") if parent.is_dir() else ():
            pid = step.name.split("-")[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                StepCgroup([step], v2=parent.parent == CGROUP_ROOT).destroy()


def _write(path: Path, value: str, check: bool = False) -> None:
    try:
        path.write_text(value)
    except OSError:
        if check:
            raise


def _procs(d: Path) -> list[int]:
    try:
        return [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except OSError:
        return []
