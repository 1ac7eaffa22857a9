"""A seccomp filter that keeps a sandboxed command from making setuid or setgid files.

The sandbox's writable trees are host files (a chat's /testbed is the user's own repo): a mode bit set inside is
set on the host the moment the syscall returns, and another local user can run such a file before any clean-up
after the step (issue 62: a 6755 file in the repo gave its runner the repo owner's euid). Mounting nosuid only
protects the sandbox's own view, so the bits must never be set at all: the kernel refuses (EPERM) every chmod,
fchmod, fchmodat(2), open/openat/creat and mknod(at) whose mode holds S_ISUID or S_ISGID. openat2 (its mode sits
in a struct a filter cannot read) and io_uring (it opens files without a syscall the filter sees) answer ENOSYS,
so programs fall back to openat; x32 calls answer ENOSYS and a foreign architecture (i386 via int 0x80) is killed.

The program is classic BPF, written out here (no libseccomp), and handed to bwrap with `--seccomp FD`.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

SETID_BITS = 0o6000
# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h)
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW, RET_KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
NR_OFFSET, ARCH_OFFSET, ARGS_OFFSET = 0, 4, 16  # struct seccomp_data
X32_BIT = 0x40000000

# arch -> (AUDIT_ARCH value, {syscall number: index of its mode argument}, syscalls refused with ENOSYS)
ARCHES = {
    "x86_64": (0xC000003E, {90: 1, 91: 1, 268: 2, 452: 2, 2: 2, 257: 3, 85: 1, 133: 1, 259: 2}, (437, 425)),
    "aarch64": (0xC00000B7, {52: 1, 53: 2, 452: 2, 56: 3, 33: 2}, (437, 425)),
}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The filter as raw `struct sock_filter` entries for this machine's architecture."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise OSError(f"no setuid filter for the {machine} architecture")
    audit_arch, mode_args, refused = ARCHES[machine]
    out = [_op(LD_W_ABS, ARCH_OFFSET), _op(JEQ_K, audit_arch, 1, 0), _op(RET_K, RET_KILL_PROCESS)]
    out.append(_op(LD_W_ABS, NR_OFFSET))
    if machine == "x86_64":
        out += [_op(JGE_K, X32_BIT, 0, 1), _op(RET_K, RET_ERRNO | errno.ENOSYS)]
    for nr in refused:
        out += [_op(JEQ_K, nr, 0, 1), _op(RET_K, RET_ERRNO | errno.ENOSYS)]
    for nr, arg in mode_args.items():  # the low 32 bits of the mode argument (little-endian)
        out += [_op(JEQ_K, nr, 0, 4), _op(LD_W_ABS, ARGS_OFFSET + 8 * arg), _op(JSET_K, SETID_BITS, 0, 1)]
        out += [_op(RET_K, RET_ERRNO | errno.EPERM), _op(RET_K, RET_ALLOW)]
    out.append(_op(RET_K, RET_ALLOW))
    return b"".join(out)


class SetidFilter:
    """The filter in a memory file that bwrap reads at each command's start (rewound before each)."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("nexus-setid-filter", os.MFD_CLOEXEC)
        os.write(self.fd, program())

    def argv(self) -> list[str]:
        """bwrap's arguments loading the filter; the fd is read from its start (the same fd serves every step)."""
        os.lseek(self.fd, 0, os.SEEK_SET)
        return ["--seccomp", str(self.fd)]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
