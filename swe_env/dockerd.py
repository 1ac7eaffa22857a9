"""Connecting to the Docker daemon, with one clear error when none answers."""

from __future__ import annotations

import os

import docker
import docker.errors

from swe_env.sandbox.base import SandboxError

START_HINT = 'start one with: eval "$(scripts/dockerd.sh start)"  (exports DOCKER_HOST)'
BWRAP_HINT = ", or use --sandbox bwrap"


def connect(timeout: float = 120.0, for_sandbox: bool = True):
    """A docker SDK client for DOCKER_HOST (or the default socket) that has answered a ping. `for_sandbox`: the
    daemon would run a sandbox, so the error names the other sandbox too (not for `env build` or `env prune`)."""

    where = os.environ.get("DOCKER_HOST") or "the default socket (DOCKER_HOST is unset)"
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        hint = START_HINT + BWRAP_HINT * for_sandbox
        raise SandboxError(f"no Docker daemon answers at {where}: {_short(exc)}; {hint}") from None
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
