"""What a bubblewrap sandbox sees of the host: the one place that decides it.

Only what the tools and the task's tests need, read-only: the system's programs and libraries (/usr and the
/bin, /lib... links to it), a short list of /etc files without secrets (passwd and group are written fresh), the
Python interpreters the sandbox runs (each environment's folder and the base installation behind it). Never
/root, /home, /run, /var, /etc as a whole, the checkout or its parent: an interpreter that lives under one of
them is bound alone, at its own path. The writable places (/testbed, /tmp) and the tools are bound by bwrap.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# /etc entries programs read at start (loader cache, Debian's alternatives links, name service and time zone).
ETC_ENTRIES = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone", "nsswitch.conf",
    "hosts", "host.conf", "protocols", "services", "mime.types", "debian_version", "os-release",
)  # fmt: skip
PASSWD = "root:x:0:0:root:/tmp:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def host_binds(private_etc: Path) -> list[str]:
    """bwrap arguments binding the system's programs and libraries and the /etc entries a sandbox may read.

    private_etc: a fresh folder of this sandbox where passwd and group are written.
    """
    argv: list[str] = []
    for path in SYSTEM_DIRS:
        p = Path(path)
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), path]
        elif p.is_dir():
            argv += ["--ro-bind", path, path]
    return argv + _etc_binds(private_etc)


def python_binds(interpreters: list[str], extra_dirs: list[str], env_dirs: list[str] = ()) -> list[str]:
    """The Python installations (and extra PATH folders), read-only at their own paths. They go after the /tmp
    bind: an environment that lives under the host's /tmp (a CI virtualenv) stays visible.

    interpreters, extra_dirs: the host's own (nexus-agent's interpreter, folders the caller chose): a virtualenv's
    base interpreter is found through its pyvenv.cfg. env_dirs: environments a sandbox built (a task's or chat's
    env) and the interpreter prefix nexus-agent chose for them: bound as they are, never followed, since the
    build wrote their pyvenv.cfg (an extra_dir inside one is covered by it and not followed either)."""
    fixed = [Path(d) for d in env_dirs if Path(d).is_dir() and not _under_system(Path(d))]
    chosen = [item for item in [*interpreters, *extra_dirs] if not any(_inside(item, d) for d in fixed)]
    argv: list[str] = []
    for root in _dedupe([*fixed, *(r for item in chosen for r in python_roots(item))]):
        argv += ["--ro-bind", str(root), str(root)]
    return argv


def _inside(item: str, folder: Path) -> bool:
    return Path(item) == folder or Path(item).is_relative_to(folder)


def _etc_binds(private_etc: Path) -> list[str]:
    private_etc.mkdir(parents=True, exist_ok=True)
    users = {"passwd": PASSWD, "group": GROUP}
    if os.getuid() != 0:  # the caller's own uid is mapped unchanged into the sandbox
        users["passwd"] += f"user:x:{os.getuid()}:{os.getgid()}:user:/tmp:/bin/bash\n"
        users["group"] += f"user:x:{os.getgid()}:\n"
    argv = ["--dir", "/etc"]
    for name, text in users.items():
        (private_etc / name).write_text(text)
        argv += ["--ro-bind", str(private_etc / name), f"/etc/{name}"]
    for name in ETC_ENTRIES:
        p = Path("/etc") / name
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), str(p)]
        elif p.exists():
            argv += ["--ro-bind", str(p), str(p)]
    return argv


def python_roots(item: str) -> list[Path]:
    """The folders a Python executable (or an environment/bin folder) needs: its environment and the base install.

    Folders already inside the bound system dirs are left out; a missing path gives nothing.
    """
    path = Path(item)
    if not path.exists():
        return []
    roots: list[Path] = []
    seen: set[Path] = set()
    todo = [path]
    while todo:
        p = todo.pop()
        folder = p if p.is_dir() else p.parent
        prefix = folder.parent if folder.name in ("bin", "Scripts") else folder
        for candidate in (prefix, Path(os.path.realpath(p)).parent.parent if p.is_file() else None):
            if candidate is None or candidate in seen or not candidate.is_dir():
                continue
            seen.add(candidate)
            cfg = candidate / "pyvenv.cfg"
            if cfg.is_file():  # a virtualenv: its base interpreter comes too
                home = _venv_home(cfg)
                if home is not None:
                    todo.append(home)
            if _under_system(candidate):
                continue
            roots.append(candidate if not _too_wide(candidate) else folder)
    return roots


def current_interpreter() -> str:
    """The interpreter running nexus-agent (its test runner serves the built-in tasks)."""
    return sys.executable


def _venv_home(cfg: Path) -> Path | None:
    for line in cfg.read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip())
    return None


def _too_wide(path: Path) -> bool:
    """A folder that holds more than one installation (a home, /opt itself): bind the bin folder instead."""
    wide = {Path("/"), Path("/root"), Path("/home"), Path("/opt"), Path("/tmp"), Path.home()}
    return path in wide or path.parent in {Path("/"), Path("/home")}


def _under_system(path: Path) -> bool:
    real = Path(os.path.realpath(path))
    return any(real == Path(d) or real.is_relative_to(d) for d in SYSTEM_DIRS if not Path(d).is_symlink())


def _dedupe(paths) -> list[Path]:
    """Each folder once, and none inside another one already bound."""
    out: list[Path] = []
    for p in sorted(set(paths), key=lambda q: len(q.parts)):
        if p == Path("/") or any(p.is_relative_to(q) for q in out):
            continue
        out.append(p)
    return out
