"""The docker backend (production): one container per task, no network, memory and process limits.

Images: the task's own `docker_image` (R2E-Gym), the locally built image for built-in tasks (the repo is copied in
at start, so one image serves them all), else the SWE-bench eval image, whose /testbed already holds the repo.
"""

from __future__ import annotations

import io
import os
import platform
import shlex
import shutil
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import docker.errors
from docker.types import Ulimit

from swe_env import images
from swe_env.dockerd import connect
from swe_env.pyenv import PyEnvConfig, ensure_env, sandbox_vars
from swe_env.pyenv_docker import container_builder, env_mounts, repo_tar
from swe_env.sandbox import common
from swe_env.sandbox.base import ExecResult, SandboxError
from swe_env.sandbox.limits import DiskBudget, DiskUsage, StepLimits, held_deleted
from swe_env.sandbox.owners import owner_tag
from tasks.builtin import is_builtin
from tasks.schema import Task

SWEBENCH_PATH = "/opt/miniconda3/envs/testbed/bin:/opt/miniconda3/bin"
_GRACE_S = 15.0  # how long past `timeout` an exec may hang (a background child holding stdout) before a kill
STEP_SCRIPT = "/tmp/.nexus-step.sh"  # where a command too long for an argument is handed to bash
# Kills every process but the container's init (1), its keeper (KEEP) and this shell: what a step left running.
_SWEEP = 'for d in /proc/[0-9]*; do p=${d#/proc/}; case "$p" in 1|KEEP|$$) ;; *) kill -9 "$p" 2>/dev/null;; esac; done'


@dataclass
class DockerConfig:
    """Settings of a docker sandbox."""

    workdir: str = common.DEFAULT_WORKDIR  # where the repo lives in the container
    tools_dir: str = common.DEFAULT_TOOLS_DIR  # where the agent tools are put (first on PATH)
    repo_cache: Path | None = None  # local git mirrors (owner__name), for repos copied in at start
    install_tools: bool = True  # put the agent tools into tools_dir
    image: str | None = None  # force this image (default: derived from the task)
    copy_repo: bool | None = None  # copy the repo in at start; None: only for built-in tasks
    limits: StepLimits = field(default_factory=StepLimits)  # pids, memory, CPUs of the container; output per step
    extra_path: tuple[str, ...] = ()  # dirs put on PATH before the image's own
    python_env: bool | None = None  # no task image: run in the built-in image with the task's cached Python env
    pyenv: PyEnvConfig | None = None  # how that env is built (first build needs PyPI)
    pull: bool = True  # try to pull the task's official image when the daemon lacks it (needs a registry)


def image_for(task: Task, config: DockerConfig | None = None) -> str:
    """The image a task runs in."""
    if config is not None and config.image:
        return config.image
    if task.docker_image:
        return task.docker_image
    if is_builtin(task):
        return images.BUILTIN_IMAGE
    return swebench_image(task.instance_id)


def swebench_image(instance_id: str, namespace: str = "swebench", arch: str | None = None, tag: str = "latest") -> str:
    """The official per-instance SWE-bench eval image, named as swebench's TestSpec.instance_image_key does."""
    key = f"{namespace}/sweb.eval.{arch or swebench_arch()}.{instance_id.lower()}:{tag}"
    return key.replace("__", "_1776_")


def swebench_arch(machine: str | None = None) -> str:
    """swebench's architecture name: arm64 on ARM machines, else x86_64."""
    machine = (machine or platform.machine()).lower()
    return "arm64" if machine in ("arm64", "aarch64") else "x86_64"


class DockerSandbox:
    """A task's container; commands run through `docker exec` wrapped in `timeout`."""

    def __init__(self, task: Task, config: DockerConfig | None = None, client=None):
        self.task = task
        self.config = config or DockerConfig()
        self.workdir = self.config.workdir
        self.tools_dir = self.config.tools_dir
        self.container = None
        self._env_extra: dict[str, str] = {}  # PYTHONPATH / VIRTUAL_ENV of a cached Python env
        self._env_bin: list[str] = []
        self.env = None  # the task's Python env (swe_env.pyenv.PyEnv) when it runs in the built-in image
        self.client = client or connect()
        self.image, self.python_env = self._choose_image()
        try:
            self._start()
            common.track(self)
        except BaseException:
            self.close()
            raise

    def _choose_image(self) -> tuple[str, bool]:
        """The task's image; without one (docker offline), the built-in image plus a cached Python env."""
        image = image_for(self.task, self.config)
        if images.image_exists(self.client, image) or (self.config.pull and _pulled(self.client, image)):
            return image, False
        own_image = self.config.image or self.task.docker_image or is_builtin(self.task)
        if own_image or self.config.python_env is False:
            raise SandboxError(f"docker image {image} is not in the local daemon; {_image_hint(image)}")
        if not images.image_exists(self.client, images.BUILTIN_IMAGE):
            raise SandboxError(
                f"docker image {image} is not in the local daemon, nor is {images.BUILTIN_IMAGE} to build a Python env "
                "in instead: run `nexus-agent env build`, or load the task's image"
            )
        return images.BUILTIN_IMAGE, True

    def _start(self) -> None:
        ws = common.make_workspace("docker")
        try:
            copy = self.config.copy_repo if self.config.copy_repo is not None else is_builtin(self.task)
            repo = None
            if copy or self.python_env:
                repo = common.prepare_repo(self.task, ws / "repo", self.config.repo_cache)
            self._run_container(self._env_volume(repo) if self.python_env else {})
            if repo is not None:
                self._put_dir(repo, self.workdir)
                self._check("git config --global --add safe.directory '*'")
            restore = self.env.restore_command(self.workdir) if self.env is not None else None
            if restore is not None:
                self._check(restore)
            if self.config.install_tools:
                self._put_dir(common.install_tools(ws / "tools"), self.tools_dir)
            self._upper = _upper_dir(self.client, self.container.id)
            roots = (self._upper,) if self._upper is not None else ()
            self.disk = DiskBudget(self.config.limits, self._usage, roots=roots)
        finally:
            shutil.rmtree(ws, ignore_errors=True)

    def _env_volume(self, repo: Path) -> dict:
        """Mount the task's cached Python env (built in a build container on first use), first on PATH."""

        cfg = self.config.pyenv or PyEnvConfig()
        build = container_builder(self.client, repo, self.workdir, self.image, cfg, self.config.limits)
        self.env = ensure_env(self.task, repo, cfg, build)
        extra = sandbox_vars(self.env, self.workdir, repo)
        self._env_bin = [extra.pop("PATH")]
        self._env_extra = extra
        return env_mounts(self.env)

    def _run_container(self, volumes: dict) -> None:

        lim = self.config.limits
        mem = f"{lim.memory_mb}m" if lim.memory_mb is not None else None
        ulimits = [Ulimit(name="cpu", soft=lim.cpu_s, hard=lim.cpu_s)] if lim.cpu_s is not None else []
        if lim.file_mb is not None:
            ulimits.append(Ulimit(name="fsize", soft=lim.file_mb << 20, hard=lim.file_mb << 20))
        self.container = self.client.containers.run(
            self.image, command=["sleep", "infinity"], detach=True, tty=False, init=True,
            network_mode="none", mem_limit=mem, memswap_limit=mem, pids_limit=lim.pids or -1, shm_size=_shm_size(lim),
            nano_cpus=int(lim.cpus * 1e9) if lim.cpus else None, ulimits=ulimits,
            labels={**images.LABEL, "nexus-agent.task": self.task.instance_id, "nexus-agent.owner": owner_tag()},
            working_dir="/", volumes=volumes,
        )  # fmt: skip
        self._path = self._container_path()
        self._keeper = self._keeper_pid()

    def _container_path(self) -> str:
        env = self.client.api.inspect_container(self.container.id)["Config"].get("Env") or []
        base = next((e.split("=", 1)[1] for e in env if e.startswith("PATH=")), common.SYSTEM_PATH)
        extra = [*self.config.extra_path, *self._env_bin]
        if self.image.startswith("swebench/"):
            extra.append(SWEBENCH_PATH)
        return ":".join([self.tools_dir, *extra, base])

    def _put_dir(self, src: Path, dest: str) -> None:
        """Copy a host dir's contents to dest in the container, owned by root (unpacked in dest's parent: repo_tar)."""
        self._check(f"rm -rf {shlex.quote(dest)} && mkdir -p {shlex.quote(dest)}")
        inner = PurePosixPath(dest)
        try:
            copied = self.container.put_archive(str(inner.parent), repo_tar(src, inner.name))
        except docker.errors.APIError as exc:
            raise SandboxError(f"could not copy {src} into the container at {dest}: {_api_reason(exc)}") from None
        if not copied:
            raise SandboxError(f"could not copy {src} into the container at {dest}")

    def _check(self, cmd: str) -> None:
        res = self.execute(cmd, timeout=300)
        if res.returncode != 0:
            raise SandboxError(f"container set-up failed ({cmd}): {res.output.strip()[-500:]}")

    def execute(self, cmd: str, timeout: float = 120.0, check_disk: bool = True) -> ExecResult:
        """Run one command; `check_disk`: a step of the agent's, held to the task's disk budget."""
        if self.container is None:
            raise SandboxError("sandbox is closed")
        refused = common.refuse_command(cmd)
        if refused is not None:
            return refused
        secs = max(1, int(round(timeout)))
        if common.fits_in_argv(cmd):
            inner = ["bash", "-c", cmd]
        else:  # longer than one argument may be: bash reads it from a file
            self.write_file(STEP_SCRIPT, cmd)
            inner = ["bash", STEP_SCRIPT]
        argv = ["timeout", "-k", "5", str(secs), *inner]
        env = {"PATH": self._path, "HOME": "/root", **common.COMMAND_ENV, **self._env_extra}
        box: dict = {"output": bytearray()}
        worker = threading.Thread(target=self._exec, args=(argv, env, box), daemon=True)
        start = time.monotonic()
        worker.start()
        self._wait(worker, start + secs + 5 + _GRACE_S, box, check_disk)
        self._sweep()  # nothing a step started outlives it (setsid children, a child holding the output open)
        worker.join(30)
        if "error" in box:
            raise SandboxError(f"docker exec failed: {box['error']}")
        disk = getattr(self, "disk", None) if check_disk else None
        over = box.get("disk") or (disk.exceeded() if disk is not None and disk.active else None)
        if over:
            text = bytes(box["output"]).decode("utf-8", errors="replace")
            return common.disk_result(text, box.get("code"), over, "disk" in box)
        return self._result(box, secs, time.monotonic() - start)

    def _wait(self, worker: threading.Thread, deadline: float, box: dict, check_disk: bool) -> None:
        """Wait for the step until `deadline`, measuring the task's disk use about once a second."""
        disk = getattr(self, "disk", None) if check_disk else None
        while worker.is_alive() and time.monotonic() < deadline:
            worker.join(min(common.DISK_POLL_S, max(0.0, deadline - time.monotonic())))
            if worker.is_alive() and disk is not None and disk.active and (over := disk.exceeded()):
                box["disk"] = over
                return

    def _usage(self) -> DiskUsage:
        """What the container wrote: its writable layer, walked from the host when the daemon's files are here
        (a local daemon, run by root); else /testbed and /tmp measured inside."""
        if self._upper is not None:
            return DiskUsage.of(self._upper) + held_deleted(self._host_pids(), None)
        where = f"{shlex.quote(self.workdir)} /tmp"
        res = self.container.exec_run(["sh", "-c", f"du -skx {where}; find {where} -xdev | wc -l"])
        numbers = [line.split()[0] for line in res.output.decode(errors="replace").splitlines() if line.strip()]
        try:
            return DiskUsage(sum(int(n) for n in numbers[:-1]) * 1024, int(numbers[-1]))
        except (ValueError, IndexError):
            return DiskUsage(0, 0)

    def _host_pids(self) -> list[int]:
        """The container's processes as host pids (the daemon is local: its layer is walked from here), whose
        deleted files held open count against the budget (issue 62: no walk sees them)."""
        try:
            top = self.client.api.top(self.container.id)
            col = top["Titles"].index("PID")
            return [int(row[col]) for row in top["Processes"] or []]
        except Exception:  # noqa: BLE001 - a container between restarts has no processes to count
            return []

    def _result(self, box: dict, secs: int, elapsed: float) -> ExecResult:
        output, code = bytes(box["output"]).decode("utf-8", errors="replace"), box.get("code")
        if box.get("capped"):
            cap = self.config.limits.output_bytes
            note = f"\n[output cut at {cap} bytes: the command printed more than that and was stopped]\n"
            return ExecResult(output + note, -1, output_capped=True)
        # 124: `timeout` fired (or the command itself exited 124: only past the deadline is it a timeout);
        # 137 past the deadline: its -k follow-up kill did
        if code is None or (code in (124, 137) and elapsed >= secs):
            return ExecResult(output, -1, timed_out=True)
        return ExecResult(output, code)

    def _exec(self, argv: list[str], env: dict[str, str], box: dict) -> None:
        """Stream the exec's output into box["output"], stopping (and killing the step) past the output cap."""
        api, cap = self.client.api, self.config.limits.output_bytes
        try:
            exec_id = api.exec_create(self.container.id, argv, workdir=self.workdir, environment=env)["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=False)
            try:
                for chunk in stream:
                    box["output"] += chunk
                    if len(box["output"]) > cap:
                        del box["output"][cap:]
                        box["capped"] = True
                        break
            finally:
                stream.close()
            if box.get("capped"):
                self._sweep()
            else:
                box["code"] = api.exec_inspect(exec_id).get("ExitCode")
        except Exception as exc:  # noqa: BLE001 - reported to the caller's thread
            box["error"] = str(exc)

    def _sweep(self) -> None:
        """Kill every process of the container except its init and keeper (the survivors of the last step).

        When no process can even start to do that (a fork bomb holds every pid), the container restarts: its
        processes die, its files stay."""
        try:
            res = self.container.exec_run(["bash", "-c", _SWEEP.replace("KEEP", self._keeper) + "; exit 0"])
            if res.exit_code == 0:
                return
            self.container.restart(timeout=0)
            self._keeper = self._keeper_pid()
        except Exception:  # noqa: BLE001 - a dead container fails the next exec with a clear error
            pass

    def _keeper_pid(self) -> str:
        """The pid of `sleep infinity`, the one child of the container's init that keeps it running."""
        for _ in range(50):
            children = self.container.exec_run(["cat", "/proc/1/task/1/children"]).output.decode().split()
            if children:
                return children[0]
            time.sleep(0.1)
        return "1"

    def read_file(self, path: str) -> str:
        res = self.execute(f"cat -- {shlex.quote(path)}", timeout=60)
        if res.returncode != 0:
            raise SandboxError(f"cannot read {path} in the container: {res.output.strip()}")
        return res.output

    def write_file(self, path: str, content: str) -> None:
        inner = Path(path) if path.startswith("/") else Path(self.workdir) / path
        self._check(f"mkdir -p {shlex.quote(str(inner.parent))}")
        buf = io.BytesIO()
        data = content.encode()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(inner.name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        if not self.container.put_archive(str(inner.parent), buf.getvalue()):
            raise SandboxError(f"cannot write {path} in the container")

    def get_patch(self) -> str:
        res = self.execute(common.patch_command(self.task.base_commit), timeout=120, check_disk=False)
        if res.returncode != 0:
            raise SandboxError(f"git diff failed in the container: {res.output.strip()[-500:]}")
        return res.output

    def close(self) -> None:
        container, self.container = self.container, None
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone; `env prune` removes labelled leftovers anyway
                pass

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shm_size(limits: StepLimits) -> str:
    """/dev/shm (a tmpfs, no part of the writable layer): Docker's 64 MiB, or the disk budget when that is less."""
    return f"{min(64, limits.disk_mb) if limits.disk_mb is not None else 64}m"


def _upper_dir(client, container_id: str) -> Path | None:
    """The container's writable layer on this host (overlay2), when this process can read it."""
    data = (client.api.inspect_container(container_id).get("GraphDriver") or {}).get("Data") or {}
    upper = Path(data["UpperDir"]) if data.get("UpperDir") else None
    return upper if upper is not None and os.access(upper, os.R_OK | os.X_OK) else None


def _api_reason(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc).strip()[-300:]


_PULL_FAILED: set[str] = set()  # images this process could not pull (no registry): not tried again


def _pulled(client, image: str) -> bool:
    """Pull `image` from its registry; False (quickly, when no registry answers) if that fails."""

    if image.startswith("nexus-agent/") or image in _PULL_FAILED:
        return False
    repo, _, tag = image.rpartition(":")
    try:
        client.images.pull(repo, tag=tag or "latest")
        return True
    except (docker.errors.APIError, docker.errors.ImageNotFound):
        _PULL_FAILED.add(image)
        return False


def _image_hint(image: str) -> str:
    if image.startswith("nexus-agent/"):
        return "build it with: nexus-agent env build"
    return "pull or load it into this daemon (no registry is reachable here), or use --sandbox bwrap"
