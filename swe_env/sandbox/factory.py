"""Pick and open a sandbox backend for a task."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, fields
from pathlib import Path

from swe_env.sandbox.base import Sandbox, SandboxError
from tasks.schema import Task

BACKENDS = ("auto", "docker", "bwrap", "local")


@dataclass
class SandboxConfig:
    """Settings every backend understands; backend-specific ones live in DockerConfig / BwrapConfig / LocalConfig."""

    repo_cache: Path | None = None  # local git mirrors (owner__name) used before any clone
    install_tools: bool = True  # install the agent tools into the sandbox
    extra_path: tuple[str, ...] = ()  # extra dirs on PATH (after the tools)


def open_sandbox(task: Task, backend: str = "auto", config: object | None = None) -> Sandbox:
    """Start a sandbox for `task`. "auto": docker when a daemon answers and the task's image exists, else bwrap.

    `config` is a SandboxConfig (shared settings) or the chosen backend's own config class. "local" runs with no
    isolation and is never chosen automatically.
    """
    if backend not in BACKENDS:
        raise SandboxError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = pick_backend(task, config)
    if backend == "docker":
        from swe_env.sandbox.docker import DockerConfig, DockerSandbox  # lazy: docker, git, off --help

        return DockerSandbox(task, _as(config, DockerConfig))
    if backend == "bwrap":
        from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox  # lazy: git, urllib, off --help

        return BwrapSandbox(task, _as(config, BwrapConfig))
    from swe_env.sandbox.local import LocalConfig, LocalSandbox  # lazy: git, urllib, off --help

    return LocalSandbox(task, _as(config, LocalConfig))


def pick_backend(task: Task, config: object | None = None) -> str:
    """docker if a daemon answers and holds the task's image, else bwrap (when installed)."""
    from swe_env.sandbox.docker import DockerConfig, image_for  # lazy: docker, git, off --help

    try:
        from swe_env.dockerd import connect
        from swe_env.images import image_exists

        client = connect(timeout=10)
        try:
            if image_exists(client, image_for(task, _as(config, DockerConfig))):
                return "docker"
        finally:
            client.close()
    except SandboxError:
        pass
    if shutil.which("bwrap") is None:
        raise SandboxError(
            "no sandbox available: no Docker daemon with the task's image, and bubblewrap is not installed "
            "(apt-get install -y bubblewrap); `--sandbox local` runs without isolation"
        )
    return "bwrap"


def _as(config: object | None, cls: type):
    """The backend's config: as given, or built from the shared fields of a SandboxConfig (or another backend's)."""
    if config is None:
        return cls()
    if isinstance(config, cls):
        return config
    names = {f.name for f in fields(cls)}
    return cls(**{f.name: getattr(config, f.name) for f in fields(config) if f.name in names})
