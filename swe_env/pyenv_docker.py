"""Task environments for the docker backend when the task's official image is not at hand (offline).

The same env as bwrap's (swe_env.pyenv: recipe, interpreter, cache key, cached on the host) is built by a build
container: the built-in image with the task's working copy at /testbed, network on (package downloads), the env
dir bind-mounted read-write and the interpreter's prefix read-only, both at their host paths. Task containers
then mount both read-only and run with no network. The docker daemon must share this machine's filesystem (a
local daemon); the host interpreters (pyenv builds for Debian 12) run in the Debian 12 based built-in image.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from swe_env import images
from swe_env.pyenv import PyEnv, build_vars, tail
from swe_env.sandbox.base import SandboxError

_IMAGE_OWN_PREFIXES = ("/usr", "/usr/local")  # the image has its own tree there: never shadow it with the host's


def env_mounts(env: PyEnv, writable: bool = False) -> dict:
    """docker `volumes=` for using (or, writable, building) `env`: the env dir and its interpreter's prefix."""
    mounts = {str(env.path): {"bind": str(env.path), "mode": "rw" if writable else "ro"}}
    if env.interpreter.prefix not in _IMAGE_OWN_PREFIXES:
        mounts[env.interpreter.prefix] = {"bind": env.interpreter.prefix, "mode": "ro"}
    return mounts


def container_builder(client, repo: Path, workdir: str, image: str = images.BUILTIN_IMAGE, timeout: float = 3600.0):
    """A swe_env.pyenv Builder that runs the build script in a one-off container holding a copy of `repo`."""

    def build(script: str, env: PyEnv) -> None:
        container = client.containers.create(
            image, ["bash", "-c", script], network_mode="host", labels=images.LABEL, working_dir=workdir,
            volumes=env_mounts(env, writable=True), environment={**build_vars(), "HOME": "/tmp"},
        )  # fmt: skip
        try:
            if not container.put_archive(workdir, repo_tar(repo)):
                raise SandboxError(f"could not copy {repo} into the build container")
            container.start()
            code = container.wait(timeout=timeout).get("StatusCode", -1)
            if code != 0:
                log = container.logs().decode(errors="replace")
                raise SandboxError(f"Python env {env.key} in docker: build failed (needs PyPI):\n{tail(log)}")
        finally:
            container.remove(force=True)

    return build


def repo_tar(repo: Path) -> bytes:
    """The working copy as a tar archive (contents at the top, owned by root)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(repo), arcname=".", filter=_root_owned)
    return buf.getvalue()


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
