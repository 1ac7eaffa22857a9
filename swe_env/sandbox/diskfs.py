"""A size-limited filesystem for a sandbox's writable places: the disk budget as a hard limit.

The budget used to be a watch that walked the task's folders once a second (issue 62): a file written through an
fd and unlinked while the fd stays open is in no folder, so 184 MiB were held against a 40 MiB budget, and with the
default limits that can fill the host's disk. Under root a bubblewrap sandbox now writes onto its own ext4 image:
a sparse file in its workspace, as large as the budget (plus ext4's overhead) with as many inodes as the inode
budget, loop-mounted nosuid,nodev. Past it, writes fail with ENOSPC, whatever holds the space: open deleted
files, sparse files, /dev/shm (bound onto it too). The image file never grows past that size on the host disk.

A task's repo (solve, eval) is the lower layer of an overlay whose upper layer is on that filesystem: what the task
changes or adds is counted, its checkout is not. A chat's /tmp and /dev/shm are on it; its repo is the user's.
The filesystem's used space (statvfs) is what the task added, measured in microseconds.

Making it costs ~15 ms per sandbox (truncate, mkfs.ext4 without a journal, mount); nothing per step.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.limits import DiskUsage, StepLimits

IMAGE = "disk.img"
MOUNT = "fs"
MKFS_OPTS = ["-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "lazy_itable_init=1,root_owner=0:0"]


def available() -> bool:
    """Whether this process can make one (root, mkfs.ext4, a loop device)."""
    return os.geteuid() == 0 and shutil.which("mkfs.ext4") is not None and Path("/dev/loop-control").exists()


def image_bytes(limits: StepLimits) -> int:
    """The image's size: the budget, plus ext4's own metadata (~3%) and 4 MiB for the folders made at start."""
    mb = limits.disk_mb
    return (mb + mb // 32 + 4) << 20


class SizedFs:
    """A loop-mounted ext4 image of a fixed size in `workspace` (mounted at workspace/fs), removed at close."""

    def __init__(self, workspace: Path, limits: StepLimits) -> None:
        self.image = workspace / IMAGE
        self.root = workspace / MOUNT
        self.mounted = False
        with open(self.image, "wb") as f:
            f.truncate(image_bytes(limits))
        inodes = ["-N", str(limits.inodes + 64)] if limits.inodes is not None else []
        _run(["mkfs.ext4", *MKFS_OPTS, *inodes, str(self.image)], "mkfs.ext4")
        self.root.mkdir()
        _run(["mount", "-o", "loop,nosuid,nodev,noatime", str(self.image), str(self.root)], "mount")
        self.mounted = True
        (self.root / "lost+found").rmdir()

    def folder(self, name: str, uid: int, gid: int, mode: int = 0o755) -> Path:
        """A folder on the filesystem owned by uid:gid."""
        path = self.root / name
        path.mkdir()
        os.chown(path, uid, gid)
        path.chmod(mode)
        return path

    def usage(self) -> DiskUsage:
        """Used space and inodes: everything written there, open deleted files included."""
        st = os.statvfs(self.root)
        return DiskUsage((st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree)

    def overlay(self, lower: Path, target: Path, uid: int, gid: int) -> Path:
        """`lower` seen read-write at `target`, its changes written here (upper and work dirs owned by uid:gid)."""
        upper, work = self.folder("upper", uid, gid), self.folder("work", 0, 0, 0o700)
        st = lower.stat()
        upper.chmod(st.st_mode & 0o7777)
        target.mkdir()
        opts = f"lowerdir={lower},upperdir={upper},workdir={work},nosuid,nodev"
        _run(["mount", "-t", "overlay", "overlay", "-o", opts, str(target)], "an overlay mount")
        return target

    def close(self, *inner: Path) -> None:
        """Unmount the mounts on it (`inner`, then itself) and remove the image."""
        for path in (*inner, self.root):
            if path.is_mount():
                subprocess.run(["umount", "-l", str(path)], capture_output=True)
        self.mounted = False
        self.image.unlink(missing_ok=True)


def unmount_under(folder: Path) -> None:
    """Lazily unmount every mount below `folder` (a dead owner's workspace, before it is removed)."""
    prefix = str(folder.resolve()) + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = [line.split()[4] for line in lines if len(line.split()) > 4 and line.split()[4].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _run(argv: list[str], what: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        raise SandboxError(f"{what} for the sandbox's size-limited filesystem failed: {res.stderr.strip()[-300:]}")
