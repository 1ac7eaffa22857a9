"""An idmapped view of a chat's repo: the sandbox's user sees the owner's files as its own; nothing changes hands.

Started by root on a root-owned repo, a chat used to chown the repo to the sandbox's user for the session and back
at close (issue 62): while it ran, root's git in another terminal refused the repo ("dubious ownership"), and a
kill -9 left it the sandbox user's for good. An idmapped mount (Linux 5.12+, ext4/xfs/btrfs/tmpfs...) instead shows
files the owner holds on disk as the sandbox user's, and writes what the sandbox user makes as the owner's. The
mount lives in the sandbox's private staging namespace (host_user.MountStage), which dies with its last fd: a
crash leaves nothing on the host to repair. It is nosuid and nodev.

Run as `python -m swe_env.sandbox.idmap SRC TARGET OWNER_UID OWNER_GID USER_UID USER_GID` inside that namespace.
"""

from __future__ import annotations

import ctypes
import os
import sys

SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442  # the same on every architecture
CLONE_NEWUSER = 0x10000000
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
OPEN_TREE_CLONE, MOVE_MOUNT_F_EMPTY_PATH = 1, 4
MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 0x2, 0x4, 0x100000
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class MountAttr(ctypes.Structure):
    """struct mount_attr (linux/mount.h)."""

    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]  # fmt: skip


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def userns_fd(uid_map: str, gid_map: str) -> int:
    """An fd of a fresh user namespace with these maps ("inside outside count"): a child unshares it and waits
    while root writes its maps, then exits; the fd keeps the namespace."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: make the namespace, say so, wait until the parent holds it
        code = 0 if _libc.unshare(CLONE_NEWUSER) == 0 else 1
        os.write(ready_w, b"x")
        os.read(go_r, 1)
        os._exit(code)
    try:
        os.read(ready_r, 1)
        with open(f"/proc/{pid}/uid_map", "w") as f:
            f.write(uid_map)
        with open(f"/proc/{pid}/gid_map", "w") as f:
            f.write(gid_map)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.write(go_w, b"x")
        os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, go_r, go_w):
            os.close(fd)


def mount_idmapped(src: str, target: str, owner: tuple[int, int], user: tuple[int, int]) -> None:
    """Mount `src` at `target` (in this mount namespace) with the owner's uid/gid shown as the user's."""
    ns = userns_fd(f"{owner[0]} {user[0]} 1", f"{owner[1]} {user[1]} 1")
    try:
        fd = _check(_libc.syscall(SYS_OPEN_TREE, AT_FDCWD, src.encode(), OPEN_TREE_CLONE | os.O_CLOEXEC), "open_tree")
        attr = MountAttr(MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, ns)
        _check(_libc.syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)),
               f"{src} lies on a filesystem without idmapped mounts (overlayfs, NFS...), which a chat under root "
               "needs to leave your repo yours: run the chat as the repo's owner, not root, or keep the repo on "
               "ext4, xfs, btrfs or tmpfs")  # fmt: skip
        _check(_libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH), "move_mount")
        os.close(fd)
    finally:
        os.close(ns)


def main(argv: list[str]) -> int:
    src, target, *ids = argv
    owner_uid, owner_gid, user_uid, user_gid = (int(i) for i in ids)
    try:
        mount_idmapped(src, target, (owner_uid, owner_gid), (user_uid, user_gid))
    except OSError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
