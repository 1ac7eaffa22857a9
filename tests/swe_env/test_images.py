"""The offline images: what they hold, and that a rebuild skips what exists."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from swe_env.images import BASE_IMAGE, ImageBuildConfig, build_images, rootfs_tarball, tarball_path
from swe_env.sandbox.base import SandboxError


def test_cached_rootfs_is_reused_without_debootstrap(tmp_path):
    cfg = ImageBuildConfig(cache_dir=tmp_path, mirror="http://unreachable.invalid/debian")
    cached = tarball_path(cfg)
    cached.write_bytes(b"rootfs")
    logs: list[str] = []
    assert rootfs_tarball(cfg, logs.append) == cached  # the mirror is unreachable: debootstrap never ran
    assert logs == [f"rootfs tarball cached: {cached}"]
    assert tarball_path(ImageBuildConfig(cache_dir=tmp_path, packages=("python3",))) != cached


def test_failed_debootstrap_leaves_no_tarball(tmp_path):
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed")
    cfg = ImageBuildConfig(cache_dir=tmp_path, mirror="http://unreachable.invalid/debian")
    with pytest.raises(SandboxError, match="debootstrap failed"):
        rootfs_tarball(cfg, lambda _: None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.docker
def test_rebuild_skips_existing_images(docker_client, builtin_image):
    logs: list[str] = []
    start = time.monotonic()
    tags = build_images(docker_client, ImageBuildConfig(), logs.append)
    assert tags == [BASE_IMAGE, builtin_image]
    assert all("skipped" in line for line in logs) and time.monotonic() - start < 10


@pytest.mark.docker
def test_builtin_image_has_what_tasks_need(docker_client, builtin_image):
    script = "python3 -m pytest --version && git --version && patch --version | head -1"
    script += " && wc -c < /etc/ssl/certs/ca-certificates.crt"
    out = docker_client.containers.run(builtin_image, ["bash", "-c", script], remove=True, network_mode="none")
    lines = out.decode().splitlines()
    assert lines[0].startswith("pytest") and lines[1].startswith("git version") and "patch" in lines[2]
    assert int(lines[3]) == Path("/etc/ssl/certs/ca-certificates.crt").stat().st_size  # the host CA bundle is in
