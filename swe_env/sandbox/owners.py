"""Who owns a temp folder or container, and the start-up sweep that reclaims those of dead owners.

A process killed with SIGKILL runs no clean-up: its sandbox workspaces, its worker pools' temp folders and its
containers stay behind. Each of them carries an owner tag (host, pid and the pid's start time, so a reused pid
is not mistaken for the owner); `sweep` removes the ones whose owner is gone. It runs once per process, when
the first sandbox opens, and at the start of every eval.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

OWNER_FILE = ".nexus-owner"
PREFIX = "nexus-"  # temp folders this project makes: nexus-bwrap-*, nexus-docker-*, nexus-local-*, nexus-run-*
_swept = False


def owner_tag(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def is_alive(tag: str) -> bool:
    """Whether the process named by `tag` still runs (a tag of another host counts as alive: not ours to judge)."""
    try:
        host, pid, start = tag.strip().rsplit(":", 2)
    except ValueError:
        return True
    if host != socket.gethostname():
        return True
    return _start_time(int(pid)) == start


def mark(folder: Path) -> Path:
    """Tag `folder` as owned by this process; returns it."""
    (folder / OWNER_FILE).write_text(owner_tag())
    return folder


def make_owned_dir(prefix: str) -> Path:
    """A fresh temp folder named nexus-<prefix>-*, tagged with this process as its owner."""
    once()
    return mark(Path(tempfile.mkdtemp(prefix=f"{PREFIX}{prefix}-")))


def once() -> None:
    """Run the sweep the first time this process asks."""
    global _swept
    if not _swept:
        _swept = True
        sweep()


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the tagged temp folders (and labelled containers, when a docker daemon is configured) of dead owners."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for folder in root.glob(f"{PREFIX}*"):
        tag_file = folder / OWNER_FILE
        try:
            tag = tag_file.read_text()
        except OSError:
            continue
        if not is_alive(tag):
            from swe_env.sandbox.diskfs import unmount_under

            unmount_under(folder)  # a sandbox's sized filesystem and overlay, still mounted
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    _sweep_containers()
    return removed


def _sweep_containers() -> None:
    """Remove containers labelled with a dead owner of this host (only when DOCKER_HOST names a daemon)."""
    if not os.environ.get("DOCKER_HOST"):
        return
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            for c in client.containers.list(all=True, filters={"label": "nexus-agent.owner"}):
                if not is_alive(c.labels.get("nexus-agent.owner", "")):
                    c.remove(force=True)
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - the sweep is best effort; a missing daemon is reported where it is used
        pass


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" when there is no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]
