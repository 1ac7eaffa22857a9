"""Connecting to the Docker daemon, with one clear error when none answers."""

from __future__ import annotations

import os

import docker
import docker.errors

from swe_env.sandbox.base import SandboxError

START_HINT = 'start one with: eval "$(scripts/dockerd.sh start)"  (exports DOCKER_HOST), or use --sandbox bwrap'


def connect(timeout: float = 120.0):
    """A docker SDK client for DOCKER_HOST (or the default socket) that has answered a ping."""

    where = os.environ.get("DOCKER_HOST") or "the default socket (DOCKER_HOST is unset)"
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise SandboxError(f"no Docker daemon answers at {where}: {_short(exc)}; {START_HINT}") from None
    return client


def daemon_answers() -> bool:
    """True when a daemon answers at DOCKER_HOST (or the default socket)."""
    try:
        connect(timeout=5).close()
        return True
    except SandboxError:
        return False


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
