"""Find a Python interpreter of a given version on this machine: pyenv, uv-managed, then the system's.

A task's environment is a virtualenv made from that interpreter; the interpreter's prefix must be visible inside
the sandbox (bwrap binds it read-only, docker mounts it), so `Interpreter.prefix` is reported with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from swe_env.sandbox.base import SandboxError

_PROBE = "import json, sys; print(json.dumps([sys.version.split()[0], sys.base_prefix, sys.executable]))"


@dataclass(frozen=True)
class Interpreter:
    """A Python found on this machine."""

    executable: str  # absolute path, symlinks resolved
    version: str  # full version, "3.9.18"
    prefix: str  # sys.base_prefix: the tree (stdlib, shared libs) the interpreter needs at run time
    origin: str  # how it was found: pyenv, uv, system

    def describe(self) -> str:
        return f"Python {self.version} ({self.origin}: {self.executable})"


def find_interpreter(version: str) -> Interpreter:
    """A Python `version` ("3.9"): pyenv's, then uv's, then `python3.9` on PATH; a one-line error when none."""
    for origin, candidates in (("pyenv", _pyenv(version)), ("uv", _uv(version)), ("system", _system(version))):
        for path in candidates:
            found = probe(path, origin)
            if found is not None and _same_minor(found.version, version):
                return found
    raise SandboxError(
        f"no Python {version} on this machine (looked in pyenv, uv-managed and python{version} on PATH); install one, "
        f"e.g. `pyenv install {version}` or `uv python install {version}`"
    )


def probe(path: str | Path, origin: str) -> Interpreter | None:
    """Ask an interpreter its version and prefix; None when it does not run."""
    try:
        out = subprocess.run([str(path), "-c", _PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    full, prefix, exe = json.loads(out.stdout)
    return Interpreter(executable=str(Path(exe).resolve()), version=full, prefix=prefix, origin=origin)


def pyenv_root() -> Path | None:
    if os.environ.get("PYENV_ROOT"):
        return Path(os.environ["PYENV_ROOT"])
    exe = shutil.which("pyenv")
    if exe is not None:
        out = subprocess.run([exe, "root"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    default = Path.home() / ".pyenv"
    return default if default.is_dir() else None


def _pyenv(version: str) -> list[Path]:
    root = pyenv_root()
    if root is None:
        return []
    dirs = sorted((root / "versions").glob(f"{version}.*"), key=_version_key, reverse=True)
    return [d / "bin" / f"python{version}" for d in dirs if (d / "bin" / f"python{version}").exists()]


def _uv(version: str) -> list[Path]:
    exe = shutil.which("uv")
    if exe is not None:
        out = subprocess.run([exe, "python", "find", "--no-project", version], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return [Path(out.stdout.strip())]
    base = Path(os.environ.get("UV_PYTHON_INSTALL_DIR", Path.home() / ".local" / "share" / "uv" / "python"))
    dirs = sorted(base.glob(f"cpython-{version}.*"), key=lambda d: d.name, reverse=True) if base.is_dir() else []
    return [d / "bin" / f"python{version}" for d in dirs if (d / "bin" / f"python{version}").exists()]


def _system(version: str) -> list[Path]:
    """`python3.X` in the system dirs, then anywhere on PATH (a virtualenv's resolves to its base interpreter)."""
    dirs = ("/usr/local/bin", "/usr/bin", "/bin", *os.environ.get("PATH", "").split(os.pathsep))
    found = [shutil.which(f"python{version}", path=d) for d in dirs if d]
    return list(dict.fromkeys(Path(p) for p in found if p))


def _same_minor(full: str, wanted: str) -> bool:
    return full == wanted or full.startswith(wanted + ".")


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in path.name.split("."))
