"""The bubblewrap backend: fast, no daemon. Each command runs in a fresh bwrap with no network.

Never root on the host: started by root, each command first drops to an unprivileged host user
(`host_user.sandbox_user`: a dedicated one, or a chat repo's owner), which is uid 0 of a new user namespace inside,
with all capabilities dropped and no_new_privs, so read-only binds stay read-only, no file handle opens outside the
mounts, /proc/sys (also read-only) and root-owned files cannot be written, and every bind is nosuid,nodev.
The sandbox sees only what `bwrap_binds.host_binds` binds (system programs, a few /etc files, the Python
installations it runs) plus the task's working copy read-write at /testbed, a private /tmp and the tools read-only
at tools_dir. PID, IPC, UTS, cgroup and network namespaces are unshared, so when a command ends (or is killed)
everything it started dies with it, setsid children included. Each command runs under `StepLimits` (a per-step
cgroup when the caller may make one, rlimits always) and the host reads at most `output_bytes` of its output.
A seccomp filter refuses setuid/setgid bits (setid_filter.py). Under root the writable places are on a filesystem
of the disk budget's size (diskfs.py), and a chat's repo is seen idmapped, through an overlay whose changes are
copied into it after each step, with its .git read-only (idmap.py, overlay_sync.py, repo_guard.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from swe_env.pyenv import PyEnv, PyEnvConfig, ensure_env, sandbox_vars
from swe_env.sandbox import common, diskfs
from swe_env.sandbox.base import ExecResult, SandboxError
from swe_env.sandbox.bwrap_binds import current_interpreter, host_binds, python_binds
from swe_env.sandbox.diskfs import SizedFs
from swe_env.sandbox.host_user import MountStage, hand_over, owner_of, repair_handed_over, sandbox_user
from swe_env.sandbox.index_proxy import CA_FILES, IndexProxy, allowed_hosts, pip_environment, relay_command, shown
from swe_env.sandbox.limits import DiskBudget, DiskUsage, StepCgroup, StepLimits, held_deleted
from swe_env.sandbox.overlay_sync import sync_upper
from swe_env.sandbox.repo_guard import check_after_step, git_entries
from swe_env.sandbox.setid_filter import SetidFilter
from tasks.schema import Task

INSTALL_HINT = "bubblewrap is not installed: apt-get install -y bubblewrap (or use --sandbox docker)"
STEP_SCRIPT = "/run/nexus/step.sh"  # where a command too long for an argument is handed to bash
BIND_FLAGS = ("--bind", "--ro-bind", "--bind-try", "--ro-bind-try")  # followed by SOURCE DEST


@dataclass
class BwrapConfig:
    """Settings of a bubblewrap sandbox."""

    workdir: str = common.DEFAULT_WORKDIR  # where the repo appears inside the sandbox
    tools_dir: str = common.DEFAULT_TOOLS_DIR  # where the agent tools appear (read-only, first on PATH)
    repo_cache: Path | None = None  # local git mirrors (owner__name) used before any clone
    install_tools: bool = True  # put the agent tools into tools_dir
    extra_path: tuple[str, ...] = ()  # dirs put on PATH before the system dirs (e.g. a Python env's bin)
    extra_env: tuple[tuple[str, str], ...] = ()  # extra environment variables (the rest is cleared)
    env_dirs: tuple[str, ...] = ()  # a built env and its interpreter's prefix: bound read-only as they are
    python_env: bool = True  # run in the task's cached Python env (swe_env.pyenv), built in this sandbox if missing
    pyenv: PyEnvConfig | None = None  # where/how those envs are built (first build needs PyPI)
    bwrap: str = "bwrap"  # the bubblewrap executable
    limits: StepLimits = field(default_factory=StepLimits)  # what one command may use


class BwrapSandbox:
    """A task's repo in its own working copy, commands under bubblewrap."""

    def __init__(self, task: Task, config: BwrapConfig | None = None, repo: Path | None = None):
        self.task = task
        self.config = config or BwrapConfig()
        self.workdir = self.config.workdir
        self.tools_dir = self.config.tools_dir
        self._bwrap = shutil.which(self.config.bwrap)
        if self._bwrap is None:
            raise SandboxError(INSTALL_HINT)
        self.user = sandbox_user()
        self._drop = os.geteuid() == 0  # started by root: every step drops to self.user
        self._stages: dict[frozenset[str], MountStage] = {}
        self._step_cgroup: StepCgroup | None = None  # the running step's (its processes' open files are counted)
        self._filter = SetidFilter()  # no command makes a setuid/setgid file (they are host files at once)
        self._root = common.make_workspace("bwrap")
        self._user_repo = repo  # a user's own repo (chat): edits land there, owned by its owner
        self._repo_owner = None  # under root, that repo's owner: the sandbox's user sees its files as its own
        self.notes: list[str] = []  # one line each for the user: what opening the sandbox repaired
        self._nested_git = git_entries(repo) if repo is not None else set()  # read-only in the sandbox
        try:
            self._share_workspace()
            self._fs = SizedFs(self._root, self.config.limits) if self._sized() else None
            base = self._root / ("base" if self._fs is not None else "repo")  # under an overlay on the sized fs
            self.repo = repo or common.prepare_repo(task, base, self.config.repo_cache)
            self._make_tmp()
            self._give_repo()
            self._tools = self._root / "tools"
            if self.config.install_tools:
                common.install_tools(self._tools)
            else:
                self._tools.mkdir()
            self._mounts = {self.workdir: self.repo, "/tmp": self._tmp, self.tools_dir: self._tools}
            self._env_extra: dict[str, str] = {}
            self._env_binds: tuple[str, ...] = ()
            self.python_env = self._python_env() if self.config.python_env else None
            self.disk = self._budget()
            if self._repo_owner is not None:  # a chat's staging namespace now: a repo it cannot map fails the open
                self._launch([*self._bwrap_argv(), "--", "true"])
            common.track(self)
        except BaseException:
            self.close()
            raise

    def _share_workspace(self) -> None:
        """Under root: the workspace is traversable by the sandbox's user only (group), not by other users."""
        if self._drop:
            os.chown(self._root, 0, self.user.gid)
            self._root.chmod(0o710)

    def _sized(self) -> bool:
        """Whether the writable places go on a size-limited filesystem (under root, with a disk budget)."""
        return self._drop and self.config.limits.disk_mb is not None and diskfs.available()

    def _make_tmp(self) -> None:
        """/tmp (and /dev/shm) of the sandbox: on the sized filesystem when there is one."""
        if self._fs is None:
            self._tmp = self._root / "tmp"
            self._tmp.mkdir()
            self._shm = None
            return
        self._tmp = self._fs.folder("tmp", self.user.uid, self.user.gid, 0o700)
        self._shm = self._fs.folder("shm", self.user.uid, self.user.gid, 0o1777)

    def _give_repo(self) -> None:
        """Under root: a task's repo and /tmp belong to the sandbox's user; on a sized filesystem the repo is seen
        through an overlay whose changes go there. A user's repo (chat) stays its owner's: the sandbox sees it
        through an idmapped mount made in its staging namespace (`MountStage`)."""
        if not self._drop:
            return
        os.chown(self._tmp, self.user.uid, self.user.gid)
        if self._user_repo is not None:
            repaired = repair_handed_over(self._user_repo)
            self.notes += [repaired] if repaired else []
            self._repo_owner = owner_of(self._user_repo)
            return
        hand_over(self.repo, self.user)
        if self._fs is not None:
            self.repo = self._fs.overlay(self.repo, self._root / "repo", self.user.uid, self.user.gid)

    def _budget(self) -> DiskBudget:
        """The task's disk budget: on the sized filesystem, its used space (a hard limit too); a chat's repo is the
        user's own, walked, with the deleted files its steps hold open."""
        limits, fs = self.config.limits, self._fs
        if fs is None:
            return DiskBudget(limits, lambda: DiskUsage.of(self.repo, self._tmp), roots=(self.repo, self._tmp))
        if self._user_repo is None:
            return DiskBudget(limits, fs.usage)
        dev = self.repo.stat().st_dev
        return DiskBudget(
            limits, lambda: DiskUsage.of(self.repo) + fs.usage() + self._held(dev), roots=(self.repo, fs.root)
        )

    def _held(self, dev: int) -> DiskUsage:
        """The deleted files on `dev` (the user's repo's disk) that the running step holds open."""
        cgroup = self._step_cgroup
        return held_deleted(cgroup.procs(), dev) if cgroup is not None else DiskUsage(0, 0)

    def _python_env(self) -> PyEnv:
        """The task's Python env (built here, in build mode, the first time), first on PATH from now on."""
        env = ensure_env(self.task, self.repo, self.config.pyenv, self._build_env)
        self._env_binds = env.ro_binds
        self._env_extra = sandbox_vars(env, self.workdir, self.repo)
        restore = env.restore_command(self.workdir)
        if restore is not None:
            res = self.execute(restore, timeout=300)
            if res.returncode != 0:
                raise SandboxError(f"restoring the env's generated files failed: {res.output.strip()[-500:]}")
        return env

    def build_env(self, script: str, env: PyEnv) -> None:
        """Run `script` in build mode for `env` (chat builds its repo's env so: pipeline/chat/env.py); SandboxError
        when it fails."""
        self._build_env(script, env)

    def _build_env(self, script: str, env: PyEnv) -> None:
        """Build mode: a step (own network namespace, the step's limits, the sandbox's user) with the env dir
        writable and the index proxy as its only way out (swe_env/sandbox/index_proxy.py)."""
        cfg, limits = self.config.pyenv or PyEnvConfig(), self.config.limits
        allowed = allowed_hosts(cfg.index_url, cfg.index_hosts)
        with IndexProxy(self._root / "net", allowed, self.user.gid if self._drop else None) as proxy:
            self._proxy = proxy
            cgroup = StepCgroup.create(limits)
            prelude = limits.ulimit_prelude(by_rlimit=cgroup is None)
            inner = prelude + relay_command(env.interpreter.executable) + script
            argv, fds = self._launch([*self._bwrap_argv(build=env), "--", "/bin/bash", "-c", inner])
            if cgroup is not None:
                argv = cgroup.enter_argv(argv)
            if self._drop:
                hand_over(env.path, self.user)
            try:
                res = common.run_process(argv, cfg.timeout, env={}, limits=limits, cgroup=cgroup, pass_fds=fds)
                self._after_step()
            finally:
                if self._drop:  # the built env is root's again: no sandbox may change it later
                    hand_over(env.path, owner_of(env.path.parent))
        if res.timed_out or res.returncode != 0:
            raise _build_failed(env, res, cfg, proxy.refused)

    def execute(self, cmd: str, timeout: float = 120.0, check_disk: bool = True) -> ExecResult:
        """Run one command; `check_disk`: a step of the agent's, held to the task's disk budget."""
        if self._root is None:
            raise SandboxError("sandbox is closed")
        refused = common.refuse_command(cmd)
        if refused is not None:
            return refused
        limits = self.config.limits
        cgroup = StepCgroup.create(limits)
        prelude = limits.ulimit_prelude(by_rlimit=cgroup is None)
        with tempfile.TemporaryFile() as script:
            argv = [*self._bwrap_argv()]
            if common.fits_in_argv(cmd):
                argv += ["--", "/bin/bash", "-c", f'{prelude}exec /bin/bash -c "$1"', "bash", cmd]
                fds: tuple[int, ...] = ()
            else:  # longer than one argument may be: bash reads it from a file bound into the sandbox
                script.write(cmd.encode("utf-8", errors="surrogateescape"))
                script.seek(0)
                fds = (script.fileno(),)
                argv[1:1] = ["--ro-bind-data", str(script.fileno()), STEP_SCRIPT]
                argv += ["--", "/bin/bash", "-c", f"{prelude}exec /bin/bash {STEP_SCRIPT}"]
            argv, stage_fds = self._launch(argv)
            if cgroup is not None:
                argv = cgroup.enter_argv(argv)
            self._step_cgroup, notes = cgroup, []
            try:
                res = common.run_process(
                    argv, timeout, env={}, limits=limits, cgroup=cgroup, pass_fds=(*fds, *stage_fds),
                    disk=getattr(self, "disk", None) if check_disk else None,
                )  # fmt: skip
            finally:
                self._step_cgroup = None
                notes = self._after_step()
        return replace(res, output=res.output + "".join(f"\n[{n}]\n" for n in notes)) if notes else res

    def _after_step(self) -> list[str]:
        """A chat's step: its overlay's changes copied into the user's repo (under root, on a sized filesystem), then
        the repo checked (setuid bits, planted .git); notes for the step's output."""
        if self._user_repo is None:
            return []
        notes = []
        if self._fs is not None and self._repo_owner is not None and (self._fs.root / "upper").is_dir():
            notes = sync_upper(self._fs.root / "upper", self._user_repo, self._repo_owner)
        return notes + check_after_step(self._user_repo, self._nested_git)

    def _launch(self, argv: list[str]) -> tuple[list[str], tuple[int, ...]]:
        """argv as the sandbox's host user runs it, and the fds it needs: under root, bind sources the user cannot
        reach come from a staging namespace, which the step enters before dropping to the user."""
        if not self._drop:
            return argv, (self._filter.fd,)
        end = argv.index("--") if "--" in argv else len(argv)
        sources = [argv[i + 1] for i in range(1, end) if argv[i] in BIND_FLAGS]
        key = frozenset(sources)
        if key not in self._stages:
            idmap = (str(self._user_repo), self._repo_owner) if self._repo_owner is not None else None
            overlay = (self._fs.root / "upper", self._fs.root / "work") if self._fs is not None else None
            self._stages[key] = MountStage(sources, self.user, idmap, overlay)
        stage = self._stages[key]
        out = [*stage.enter_argv(), argv[0]]
        i = 1
        while i < len(argv):
            if i < end and argv[i] in BIND_FLAGS:
                out += [argv[i], stage.source(argv[i + 1]), argv[i + 2]]
                i += 3
            else:
                out.append(argv[i])
                i += 1
        return out, (*stage.fds, self._filter.fd)

    def _bwrap_argv(self, build: PyEnv | None = None) -> list[str]:
        """The bwrap arguments of a command; `build`: build mode for that env (the index proxy, env dir writable)."""
        env_binds = [*(build.ro_binds if build is not None else self._env_binds), *self.config.env_dirs]
        argv = [self._bwrap, *host_binds(self._root / "etc")]
        argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
        if self._shm is not None:  # on the sized filesystem: no unbounded tmpfs
            argv += ["--bind", str(self._shm), "/dev/shm"]
        argv += ["--bind", str(self._tmp), "/tmp"]
        argv += python_binds([current_interpreter()], list(self.config.extra_path), env_binds)
        argv += ["--bind", str(self.repo), self.workdir, "--ro-bind", str(self._tools), self.tools_dir]
        for rel in self._git_binds():  # git reads them, never writes (repo_guard.py)
            argv += ["--ro-bind", str(self._user_repo / rel), f"{self.workdir}/{rel}"]
        if build is not None:  # TLS needs the CA bundles, pip its proxy; the env is written
            for path in CA_FILES:
                argv += ["--ro-bind-try", path, path]
            argv += [*self._proxy.bind_args(), "--bind", str(build.path), str(build.path)]
        argv += ["--remount-ro", "/"]  # the sandbox's own root (where mount points were made) is not writable
        argv += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL", *self._filter.argv()]
        if self._drop:  # the host user is root of the sandbox's own namespace (owner of /testbed inside)
            argv += ["--uid", "0", "--gid", "0"]
        argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        argv += ["--die-with-parent", "--new-session"]
        argv.append("--unshare-net")  # a build's only way out is the index proxy's socket (index_proxy.py)
        argv += ["--clearenv", "--chdir", self.workdir]
        pip = pip_environment((self.config.pyenv or PyEnvConfig()).index_url) if build is not None else {}
        for key, value in {**self._env(), **pip}.items():
            argv += ["--setenv", key, value]
        return argv

    def _git_binds(self) -> list[str]:
        """The user's repo's `.git` entries (its own and those below it when the chat opened), bound read-only."""
        if self._user_repo is None:
            return []
        top = [".git"] if os.path.lexists(self._user_repo / ".git") else []
        return top + sorted(self._nested_git)

    def _env(self) -> dict[str, str]:
        # the task's env (with its test runner) right after the tools; never the host's interpreter by accident
        env_bin = [self._env_extra["PATH"]] if "PATH" in self._env_extra else []
        path = [self.tools_dir, *self.config.extra_path, *env_bin, common.SYSTEM_PATH]
        env = {"PATH": ":".join(path), "HOME": "/tmp", **common.COMMAND_ENV}
        env.update({k: v for k, v in self._env_extra.items() if k != "PATH"})
        env.update(dict(self.config.extra_env))
        return env

    def read_file(self, path: str) -> str:
        try:
            fd = common.open_inside(path, self.workdir, self._mounts, os.O_RDONLY)
            with os.fdopen(fd, "rb") as f:
                return f.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise SandboxError(f"cannot read {path} in the sandbox: {exc.strerror}") from None

    def write_file(self, path: str, content: str) -> None:
        host = common.rewrite_path(path, self.workdir, self._mounts)
        if host is None or host.is_relative_to(self._tools):
            raise SandboxError(f"cannot write {path}: only {self.workdir} and /tmp are writable in the sandbox")
        if self._user_repo is not None and ".git" in host.parts:  # read-only in the sandbox, so here too
            raise SandboxError(f"cannot write {path}: the repo's git is read-only in the sandbox")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            fd = common.open_inside(path, self.workdir, self._mounts, flags, make_parents=True)
            with os.fdopen(fd, "wb") as f:
                if self._drop:
                    owner = self._repo_owner if host.is_relative_to(self.repo) and self._repo_owner else self.user
                    os.fchown(f.fileno(), owner.uid, owner.gid)
                f.write(content.encode("utf-8", errors="surrogateescape"))
        except OSError as exc:
            raise SandboxError(f"cannot write {path} in the sandbox: {exc.strerror}") from None

    def get_patch(self) -> str:
        """The task's change; an episode that ended on its disk budget first gets its /tmp and /dev/shm emptied, so
        that git finds room on the sized filesystem (neither is part of the patch, and no step runs after it)."""
        if self._fs is not None and self.disk.exceeded() is not None:
            for folder in (self._tmp, self._shm):
                for entry in os.scandir(folder):
                    shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)
        res = self.execute(common.patch_command(self.task.base_commit), timeout=120, check_disk=False)
        if res.returncode != 0:
            raise SandboxError(f"git diff failed in the sandbox: {res.output.strip()[-500:]}")
        return res.output

    def close(self) -> None:
        root, self._root = getattr(self, "_root", None), None
        for stage in getattr(self, "_stages", {}).values():
            stage.close()
        if getattr(self, "_filter", None) is not None:
            self._filter.close()
        if getattr(self, "_fs", None) is not None:
            self._fs.close(root / "repo" if root is not None else self._fs.root)
            self._fs = None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> BwrapSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _build_failed(env: PyEnv, res: ExecResult, cfg: PyEnvConfig, refused: list[str]) -> SandboxError:
    """Why a build failed: its exit, what the index proxy turned away (a host it may not reach), its last lines."""
    why = f"not done within {cfg.timeout:.0f} s" if res.timed_out else f"exit {res.returncode}"
    turned = "".join(f"\n  proxy refused: {r}" for r in refused[:3])
    return SandboxError(
        f"Python env {env.key}: build failed ({why}; it reaches only {shown(cfg.index_url)}):{turned}\n"
        f"{_tail(res.output)}"
    )


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(line[:300] for line in text.splitlines()[-lines:])
