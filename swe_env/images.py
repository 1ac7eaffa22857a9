"""Offline image build: a debootstrap root filesystem -> `docker import` -> base image -> the built-in task image.

No registry is reachable here, so the images the docker backend needs for built-in tasks are built from Debian
packages alone. Each step is skipped when its result already exists (image in the daemon, rootfs tarball in the
cache dir), so a rerun on the same machine costs seconds.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker.errors

from swe_env.sandbox.base import SandboxError

BASE_IMAGE = "nexus-agent/base:bookworm"
BUILTIN_IMAGE = "nexus-agent/builtin:bookworm"
LABEL = {"nexus-agent": "1"}


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "nexus-agent" / "images"


@dataclass
class ImageBuildConfig:
    """How `nexus-agent env build` makes its images."""

    suite: str = "bookworm"  # Debian release debootstrap installs
    mirror: str = "http://deb.debian.org/debian"  # Debian mirror debootstrap downloads from
    packages: tuple[str, ...] = (
        "python3", "python3-venv", "python3-pip", "python3-pytest", "git", "ca-certificates", "patch", "procps",
    )  # fmt: skip
    cache_dir: Path = field(default_factory=default_cache_dir)  # where the rootfs tarball is kept between runs
    base_image: str = BASE_IMAGE  # tag of the imported root filesystem
    builtin_image: str = BUILTIN_IMAGE  # tag of the image built-in tasks run in
    ca_file: Path = Path("/etc/ssl/certs/ca-certificates.crt")  # host CA bundle copied in (HTTPS proxy CA)
    force: bool = False  # rebuild every step even when its result exists


BUILTIN_DOCKERFILE = """\
FROM {base}
RUN git config --system user.email nexus@localhost && git config --system user.name nexus-agent \\
 && git config --system --add safe.directory '*' && mkdir -p /testbed /opt/nexus-tools
ENV LANG=C.UTF-8
WORKDIR /testbed
LABEL nexus-agent=1
"""


def build_images(client, cfg: ImageBuildConfig, log: Callable[[str], None] = print) -> list[str]:
    """Make sure the base and built-in images exist in the daemon `client` talks to; return their tags."""
    if cfg.force or not image_exists(client, cfg.base_image):
        tarball = rootfs_tarball(cfg, log)
        log(f"importing {tarball.name} as {cfg.base_image}")
        repo, tag = cfg.base_image.rsplit(":", 1)
        client.api.import_image_from_file(str(tarball), repository=repo, tag=tag)
    else:
        log(f"{cfg.base_image}: present, skipped")
    if cfg.force or not image_exists(client, cfg.builtin_image):
        log(f"building {cfg.builtin_image} FROM {cfg.base_image}")
        dockerfile = BUILTIN_DOCKERFILE.format(base=cfg.base_image).encode()
        client.images.build(fileobj=io.BytesIO(dockerfile), tag=cfg.builtin_image, network_mode="none", rm=True)
    else:
        log(f"{cfg.builtin_image}: present, skipped")
    return [cfg.base_image, cfg.builtin_image]


def image_exists(client, name: str) -> bool:

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def rootfs_tarball(cfg: ImageBuildConfig, log: Callable[[str], None] = print) -> Path:
    """The cached root filesystem tarball for cfg's suite and packages, made with debootstrap when missing."""
    tarball = tarball_path(cfg)
    if tarball.exists() and not cfg.force:
        log(f"rootfs tarball cached: {tarball}")
        return tarball
    if shutil.which("debootstrap") is None:
        raise SandboxError("debootstrap not found: apt-get install -y debootstrap")
    cfg.cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nexus-rootfs-", dir=cfg.cache_dir) as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(f"debootstrap {cfg.suite} (minbase + {len(cfg.packages)} packages), about a minute")
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(cfg.packages)}", cfg.suite, str(rootfs),
              cfg.mirror])  # fmt: skip
        _add_host_ca(rootfs, cfg.ca_file)
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        partial = tarball.with_suffix(".partial")
        log(f"packing {tarball.name}")
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."])
        partial.rename(tarball)
    return tarball


def tarball_path(cfg: ImageBuildConfig) -> Path:
    """Where the rootfs tarball for cfg's suite, mirror and packages is cached."""
    key = hashlib.sha256(" ".join([cfg.suite, cfg.mirror, *sorted(cfg.packages)]).encode()).hexdigest()[:12]
    return cfg.cache_dir / f"rootfs-{cfg.suite}-{key}.tar"


def _add_host_ca(rootfs: Path, ca_file: Path) -> None:
    """HTTPS here goes through a proxy whose CA only the host bundle has; pip inside the image needs it."""
    if ca_file.is_file():
        target = rootfs / "etc" / "ssl" / "certs" / "ca-certificates.crt"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ca_file, target)


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-15:])
        raise SandboxError(f"{argv[0]} failed (exit {proc.returncode}):\n{tail}")
