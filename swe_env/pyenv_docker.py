"""Task environments for the docker backend when the task's official image is not at hand (offline).

The same env as bwrap's (swe_env.pyenv: recipe, interpreter, cache key, cached on the host) is built by a build
container: the built-in image with the task's working copy at /testbed, the env dir bind-mounted read-write and the
interpreter's prefix read-only, both at their host paths. Like a task container it has no network and the step's
limits; its one way out is the index proxy's socket (swe_env/sandbox/index_proxy.py: the package index only), and it
gets no variable of the host's. Task containers then mount both read-only and run with no network. The docker daemon
must share this machine's filesystem (a local daemon); the host interpreters (pyenv builds for Debian 12) run in the
Debian 12 based built-in image.
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from docker.types import Ulimit

from swe_env import images
from swe_env.pyenv import PyEnv, PyEnvConfig, tail
from swe_env.sandbox import index_proxy
from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.common import make_workspace
from swe_env.sandbox.index_proxy import IndexProxy, allowed_hosts, pip_environment, relay_command
from swe_env.sandbox.limits import StepLimits

_IMAGE_OWN_PREFIXES = ("/usr", "/usr/local")  # the image has its own tree there: never shadow it with the host's


def env_mounts(env: PyEnv, writable: bool = False) -> dict:
    """docker `volumes=` for using (or, writable, building) `env`: the env dir and its interpreter's prefix."""
    mounts = {str(env.path): {"bind": str(env.path), "mode": "rw" if writable else "ro"}}
    if env.interpreter.prefix not in _IMAGE_OWN_PREFIXES:
        mounts[env.interpreter.prefix] = {"bind": env.interpreter.prefix, "mode": "ro"}
    return mounts


def container_builder(
    client, repo: Path, workdir: str, image: str = images.BUILTIN_IMAGE, cfg: PyEnvConfig | None = None,
    limits: StepLimits | None = None,
):  # fmt: skip
    """A swe_env.pyenv Builder that runs the build script in a one-off container holding a copy of `repo`."""
    cfg, limits = cfg or PyEnvConfig(), limits or StepLimits()

    def build(script: str, env: PyEnv) -> None:
        ws = make_workspace("docker-build")
        try:
            with IndexProxy(ws / "net", allowed_hosts(cfg.index_url, cfg.index_hosts)) as proxy:
                _run_build(client, image, workdir, repo, relay_command(env.interpreter.executable) + script, env, {
                    "volumes": {**env_mounts(env, writable=True), **_proxy_mounts(proxy)},
                    "environment": {**pip_environment(cfg.index_url), "HOME": "/tmp"}, **_limits(limits),
                }, cfg.timeout)  # fmt: skip
        finally:
            shutil.rmtree(ws, ignore_errors=True)

    return build


def _run_build(client, image: str, workdir: str, repo: Path, script: str, env: PyEnv, opts: dict, timeout: float):
    """Create, fill, run and remove the build container; SandboxError when the build fails."""
    container = client.containers.create(
        image, ["bash", "-c", script], network_mode="none", labels=images.LABEL, working_dir=workdir, **opts
    )
    try:
        inner = PurePosixPath(workdir)  # unpacked in its parent: see repo_tar
        if not container.put_archive(str(inner.parent), repo_tar(repo, inner.name)):
            raise SandboxError(f"could not copy {repo} into the build container")
        container.start()
        code = container.wait(timeout=timeout).get("StatusCode", -1)
        if code != 0:
            log = container.logs().decode(errors="replace")
            raise SandboxError(f"Python env {env.key} in docker: build failed (exit {code}):\n{tail(log)}")
    finally:
        container.remove(force=True)


def _proxy_mounts(proxy: IndexProxy) -> dict:
    return {
        str(proxy.socket_path): {"bind": index_proxy.INSIDE_SOCKET, "mode": "ro"},
        str(proxy.relay_path): {"bind": index_proxy.INSIDE_RELAY, "mode": "ro"},
    }


def _limits(lim: StepLimits) -> dict:
    """The step's limits as docker options (as the task container gets them: swe_env/sandbox/docker.py)."""

    mem = f"{lim.memory_mb}m" if lim.memory_mb is not None else None
    ulimits = [Ulimit(name="cpu", soft=lim.cpu_s, hard=lim.cpu_s)] if lim.cpu_s is not None else []
    if lim.file_mb is not None:
        ulimits.append(Ulimit(name="fsize", soft=lim.file_mb << 20, hard=lim.file_mb << 20))
    return {"mem_limit": mem, "memswap_limit": mem, "pids_limit": lim.pids or -1, "ulimits": ulimits,
            "nano_cpus": int(lim.cpus * 1e9) if lim.cpus else None, "security_opt": ["no-new-privileges"]}  # fmt: skip


def repo_tar(repo: Path, name: str) -> bytes:
    """The working copy as a tar archive of one folder `name`, owned by root. It is unpacked in the parent of where
    it goes: docker refuses a relative symlink that climbs out of the folder it unpacks into (a repo's
    `docs/x -> ../../../shared/x`), and the container is the sandbox, so such a link may point anywhere in it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(repo), arcname=name, filter=_root_owned)
    return buf.getvalue()


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
