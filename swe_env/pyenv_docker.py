"""Per-repo Python envs for the docker backend when a task has no image of its own (docker offline).

The env lives in a docker volume per (repo, version), built once by a set-up container that may reach PyPI
(`network_mode="host"`) and then mounted read-only into each task container, which has no network.
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

from filelock import FileLock

from swe_env import images
from swe_env.pyenv import READY, PyEnvConfig, build_script, env_key, tail
from swe_env.sandbox.base import SandboxError
from tasks.schema import Task

MOUNT = "/opt/nexus-pyenv"
_SETUP_REPO = "/tmp/nexus-setup-repo"


def volume_name(task: Task) -> str:
    return "nexus-pyenv-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", env_key(task)).lower()


def ensure_volume(
    client, task: Task, repo: Path, cfg: PyEnvConfig | None = None, image: str = images.BUILTIN_IMAGE
) -> str:
    """The volume holding the task's (repo, version) env, built from the host working copy `repo` the first time."""
    import docker.errors

    cfg = cfg or PyEnvConfig()
    name = volume_name(task)
    cfg.cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cfg.cache_dir / f"{name}.lock")):
        try:
            client.volumes.get(name)
        except docker.errors.NotFound:
            client.volumes.create(name, labels=images.LABEL)
        if not _ready(client, name, image):
            _build(client, task, repo, cfg, name, image)
    return name


def _ready(client, volume: str, image: str) -> bool:
    out = client.containers.run(
        image, ["bash", "-c", f"test -f {MOUNT}/{READY} && echo yes || echo no"], remove=True,
        network_mode="none", volumes={volume: {"bind": MOUNT, "mode": "ro"}}, labels=images.LABEL,
    )  # fmt: skip
    return out.decode().strip() == "yes"


def _build(client, task: Task, repo: Path, cfg: PyEnvConfig, volume: str, image: str) -> None:
    script = f"find {MOUNT} -mindepth 1 -delete\n" + build_script(task, repo, MOUNT, "python3", cfg, _SETUP_REPO)
    container = client.containers.create(
        image, ["bash", "-c", script], network_mode="host", labels=images.LABEL,
        volumes={volume: {"bind": MOUNT, "mode": "rw"}},
    )  # fmt: skip
    try:
        container.put_archive("/tmp", _repo_tar(repo))
        container.start()
        code = container.wait(timeout=cfg.timeout).get("StatusCode", -1)
        if code != 0:
            log = container.logs().decode(errors="replace")
            raise SandboxError(f"Python env for {task.repo} in docker: build failed (needs PyPI):\n{tail(log)}")
    finally:
        container.remove(force=True)


def _repo_tar(repo: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(repo), arcname=Path(_SETUP_REPO).name, filter=_root_owned)
    return buf.getvalue()


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
