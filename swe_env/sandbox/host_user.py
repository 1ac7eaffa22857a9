"""Who a bubblewrap sandbox is on the host, and how that user reaches what the sandbox binds.

Started by root, bwrap maps the sandbox's uid 0 to host root: what the agent writes is root's on the host and
/proc/sys is writable (a core_pattern written there makes the kernel run a program as host root). So under root
every step drops to an unprivileged host user first: a dedicated one (the `nexus-sandbox` account when it exists,
else uid/gid 60999, which no account should hold), for a chat too. Inside, that user is uid 0 of the sandbox's own
user namespace, with no capabilities.

bwrap then resolves its bind sources with that user's rights. A source it cannot reach (an interpreter under
/root, a 0700 virtualenv) is bind-mounted at a staging path inside the sandbox's own workspace, in a private mount
namespace that root makes once per sandbox; each step enters it (nsenter) before dropping to the user (setpriv).
A chat's repo is mounted there idmapped (idmap.py: its owner's files seen as the user's, nothing chowned), and
under a size-limited filesystem an overlay over it is mounted afresh before each step (overlay_sync.py).
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.limits import scan
from swe_env.sandbox.owners import PREFIX, mark

DEDICATED_NAME = "nexus-sandbox"
DEDICATED_ID = 60999  # the uid/gid used when no nexus-sandbox account exists (scripts/install.sh makes one)
SETID = stat.S_ISUID | stat.S_ISGID


@dataclass(frozen=True)
class HostUser:
    """A host identity a sandbox runs as."""

    uid: int
    gid: int

    @property
    def is_root(self) -> bool:
        return self.uid == 0


def current_user() -> HostUser:
    return HostUser(os.getuid(), os.getgid())


def dedicated_user() -> HostUser:
    """The account sandboxes run as when started by root (never root itself)."""
    try:
        entry = pwd.getpwnam(DEDICATED_NAME)
    except KeyError:
        return HostUser(DEDICATED_ID, DEDICATED_ID)
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise SandboxError(f"the {DEDICATED_NAME} account is uid/gid 0; it must be an unprivileged account")
    return HostUser(entry.pw_uid, entry.pw_gid)


def owner_of(path: Path) -> HostUser:
    st = path.lstat()
    return HostUser(st.st_uid, st.st_gid)


def sandbox_user() -> HostUser:
    """Who a sandbox runs as: the caller when it is not root, else the dedicated user (never host uid or gid 0).
    A chat's repo is not handed to it: the sandbox sees the repo through an idmapped mount (swe_env.sandbox.idmap),
    so the repo stays its owner's on disk, and a repo whose group is root gives the sandbox no gid 0."""
    if os.geteuid() != 0:
        return current_user()
    return dedicated_user()


def repair_handed_over(repo: Path) -> str | None:
    """Give a repo left the sandbox account's back to root, and say so (None: nothing to repair).

    Before chats saw a root-owned repo through an idmapped mount, they chowned it to the sandbox account for the
    session and back at close; a kill -9 left it that account's for good (issue 62), and root's git then refused
    it. No user's repo belongs to that account otherwise, so the next chat on it gives its files back."""
    account = dedicated_user()
    if os.geteuid() != 0 or owner_of(repo) != account:
        return None
    hand_over(repo, HostUser(0, 0), only_from=account)
    return f"repaired: {repo} was left owned by {DEDICATED_NAME} (an interrupted chat); its files are root's again"


def walk(root: Path):
    """Every entry under root (root included), never following a symlink."""
    yield root
    for entry in scan(root):
        yield Path(entry.path)


def hand_over(root: Path, to: HostUser, only_from: HostUser | None = None) -> None:
    """Give every entry under root (or those owned by `only_from`) to `to`, without following symlinks. chown of a
    regular file also clears its setuid/setgid bits."""
    for path in walk(root):
        try:
            st = path.lstat()
            if (st.st_uid, st.st_gid) == (to.uid, to.gid):
                continue
            if only_from is None or (st.st_uid, st.st_gid) == (only_from.uid, only_from.gid):
                os.lchown(path, to.uid, to.gid)
        except OSError:
            continue


def reachable(path: str, user: HostUser) -> bool:
    """Whether `user` can walk down to `path` (search permission on every folder above it; ACLs not read)."""
    p = Path(path)
    for folder in [*reversed(p.parents)]:
        try:
            st = folder.stat()
        except OSError:
            return False
        if st.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif st.st_gid == user.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


STAGE_BASES = ("/tmp", "/var/tmp", "/dev/shm")  # where a staging folder goes when the temp dir is out of reach


class MountStage:
    """A private mount namespace (made by root, kept by an fd) where each source `user` cannot reach is
    bind-mounted at `<stage dir>/<n>`; steps enter it, then drop to `user`, then start bwrap.

    The stage dir is a fresh folder the user can reach (`0710 root:<user's group>`, in the temp dir or else
    /tmp): a sandbox's own workspace may lie under a folder only root can enter (an eval sets TMPDIR to its
    private run folder), and then its repo and /tmp are staged too."""

    def __init__(
        self, sources: list[str], user: HostUser, idmap: tuple[str, HostUser] | None = None,
        overlay: tuple[Path, Path] | None = None,
    ) -> None:  # fmt: skip
        self.user = user
        self.staged: dict[str, str] = {}
        self.fd: int | None = None
        self.stage_dir: Path | None = None
        self.idmap = idmap if idmap is not None and idmap[0] in sources else None  # (a chat's repo, its owner)
        self.overlay = overlay if self.idmap is not None else None  # (upper, work): the repo seen through an overlay
        self.merged: Path | None = None
        todo = [s for s in dict.fromkeys(sources) if Path(s).exists() and not reachable(s, user)]
        todo = [s for s in todo if self.idmap is None or not Path(s).is_relative_to(self.idmap[0])]
        if todo or self.idmap is not None:
            self._make(todo)

    def _make(self, sources: list[str]) -> None:

        for tool in ("unshare", "nsenter"):
            if shutil.which(tool) is None:
                raise SandboxError(f"{tool} (util-linux) is needed to run the sandbox under root")
        base = next(
            (b for b in (tempfile.gettempdir(), *STAGE_BASES) if Path(b).is_dir() and reachable(b + "/x", self.user)),
            None,
        )
        if base is None:
            raise SandboxError(f"no temp folder the sandbox's user (uid {self.user.uid}) can enter: {STAGE_BASES}")
        stage_dir = self.stage_dir = mark(Path(tempfile.mkdtemp(prefix=f"{PREFIX}stage-", dir=base)))
        os.chown(stage_dir, 0, self.user.gid)
        stage_dir.chmod(0o710)
        mounts = []
        for n, src in enumerate(sources):
            target = stage_dir / str(n)
            target.mkdir() if Path(src).is_dir() else target.touch()
            mounts.append(f"mount --rbind -- {shlex.quote(src)} {shlex.quote(str(target))}")
            self.staged[src] = str(target)
        if self.idmap is not None:
            mounts.append(self._idmap_command(stage_dir / "repo"))
        if self.overlay is not None:
            self.merged = stage_dir / "merged"
            self.merged.mkdir()
        script = " && ".join([*mounts, "echo ready", "read _"])
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_helper_env(),
        )  # fmt: skip
        try:
            if proc.stdout.readline().strip() != b"ready":
                raise SandboxError(f"could not stage the sandbox's binds: {proc.stderr.read().decode()[-300:]}")
            self.fd = os.open(f"/proc/{proc.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            proc.stdin.close()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()

    def _idmap_command(self, target: Path) -> str:
        """The shell command mounting the chat's repo at `target`, its owner's files shown as the user's."""
        src, owner = self.idmap
        target.mkdir()
        self.staged[src] = str(target)
        args = [sys.executable, "-m", "swe_env.sandbox.idmap", src, str(target)]
        args += [str(i) for i in (owner.uid, owner.gid, self.user.uid, self.user.gid)]
        return shlex.join(args)

    def source(self, path: str) -> str:
        """Where bwrap finds `path` (its staging path when it is staged; a path inside the idmapped repo, such as
        its .git bound read-only, through that view)."""
        if self.idmap is not None and path != self.idmap[0] and Path(path).is_relative_to(self.idmap[0]):
            return str(Path(self.staged[self.idmap[0]]) / Path(path).relative_to(self.idmap[0]))
        if self.merged is not None and path == self.idmap[0]:
            return str(self.merged)
        return self.staged.get(path, path)

    def _overlay_prelude(self) -> list[str]:
        """Before each step (as root, in the namespace): a fresh overlay over the idmapped repo, its upper layer
        emptied (the last step's changes were copied into the repo: overlay_sync.py)."""
        if self.merged is None:
            return []
        upper, work = self.overlay
        lower, merged, u = self.staged[self.idmap[0]], str(self.merged), self.user
        mode = stat.S_IMODE(Path(self.idmap[0]).stat().st_mode)
        # a folder renamed is copied whole and chmod copies data (no redirect or metacopy entries to miss in the sync)
        opts = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,metacopy=off,nosuid,nodev"
        script = (
            f"umount -l {shlex.quote(merged)} 2>/dev/null; rm -rf {shlex.quote(str(upper))} {shlex.quote(str(work))}"
            f" && mkdir -m 0700 {shlex.quote(str(work))} && mkdir -m {mode:o} {shlex.quote(str(upper))}"
            f" && chown {u.uid}:{u.gid} {shlex.quote(str(upper))}"
            f" && mount -t overlay overlay -o {shlex.quote(opts)} {shlex.quote(merged)}"
        )
        return ["/bin/sh", "-c", f'{script} && exec "$@"', "nexus-overlay"]

    def enter_argv(self) -> list[str]:
        """The prefix that enters the staging namespace (if any) and becomes the user, before bwrap."""
        prefix = ["nsenter", f"--mount=/proc/self/fd/{self.fd}", "--"] if self.fd is not None else []
        u = self.user
        drop = ["setpriv", f"--reuid={u.uid}", f"--regid={u.gid}", "--clear-groups", "--"]
        return [*prefix, *self._overlay_prelude(), *drop]

    @property
    def fds(self) -> tuple[int, ...]:
        return (self.fd,) if self.fd is not None else ()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.stage_dir is not None:  # empty mount points on the host (the mounts lived in the namespace)
            shutil.rmtree(self.stage_dir, ignore_errors=True)
            self.stage_dir = None


def _helper_env() -> dict[str, str]:
    """The environment of the staging namespace's commands: this project importable (swe_env.sandbox.idmap)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{root}:{path}" if path else root}
