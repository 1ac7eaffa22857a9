"""A task's Python environment: a virtualenv made from the recipe's interpreter, built inside the sandbox, cached.

The recipe (swe_env.envs.recipes) names the Python version, packages, pre-install and install commands; the
interpreter is found on the host (swe_env.envs.interpreters). The build script runs INSIDE the task's sandbox,
in the task's working copy at the sandbox's workdir (/testbed), as the sandbox's user under a step's limits, in
its own network namespace whose only way out is a proxy to the package index (swe_env/sandbox/index_proxy.py):
the repo's install code never runs on the host and reaches nothing of it. The built env is root's (read-only to
every later sandbox), and whether it is built is recorded host-side, beside it in the cache folder
(`<key>.ready.json`, swe_env/records.py): nothing the build writes is read back by the host as a record.

The repo is installed the way the recipe says (`pip install -e .` for SWE-bench's Python repos), so a repo that
is its own test runner (pytest) and files the install generates (setuptools_scm's `_version.py`, egg-info) work.
Those generated files are saved with the env (`overlay.tar`) and restored into every later working copy of the
same instance.

The cache key holds the repo, version, the base commit (when the repo itself is installed), the interpreter's
version and a hash of interpreter path + recipe: a changed recipe or interpreter builds a new env.

A first build takes minutes: whoever opens a sandbox can hear of it with `build_progress(listener)`, which gets
{"kind": "env_build", "repo", "version", "key"} when a build starts and {"kind": "env_built", ..., "seconds"} when
it is done (solve and eval show them: pipeline/run.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from swe_env.envs.interpreters import Interpreter, find_interpreter
from swe_env.envs.recipes import Recipe, as_of, recipe_for
from swe_env.records import read_record, write_record
from tasks.schema import Task

OVERLAY = "overlay.tar"
PYPI = "https://pypi.org/simple"


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "nexus-agent" / "pyenvs"


def default_index_url() -> str:
    """The index builds use: NEXUS_PIP_INDEX_URL when the user set it (never the host's PIP_INDEX_URL, which may
    carry credentials meant for other tools), else PyPI."""
    return os.environ.get("NEXUS_PIP_INDEX_URL") or PYPI


def default_index_hosts() -> tuple[str, ...]:
    """Other hosts a build may reach (NEXUS_PIP_INDEX_HOSTS, comma-separated host[:port]: a mirror's file host)."""
    return tuple(h.strip() for h in os.environ.get("NEXUS_PIP_INDEX_HOSTS", "").split(",") if h.strip())


@dataclass
class PyEnvConfig:
    """Where and how task environments are built."""

    cache_dir: Path = field(default_factory=default_cache_dir)  # one subdir per env key
    test_packages: tuple[str, ...] = ("pytest",)  # installed when the recipe leaves the env without them
    pip_args: tuple[str, ...] = ()  # extra arguments for every pip install (e.g. --no-index)
    index_url: str = field(default_factory=default_index_url)  # the only index a build reaches (https)
    index_hosts: tuple[str, ...] = field(default_factory=default_index_hosts)  # other hosts it may reach
    timeout: float = 3600.0  # seconds the whole build may take


@dataclass(frozen=True)
class PyEnv:
    """An environment (built or to build) and what a sandbox needs to use it."""

    path: Path  # the virtualenv (same path inside the sandbox as on the host)
    key: str  # its cache key (the dir name)
    recipe: Recipe
    interpreter: Interpreter
    created_at: str = ""  # the task's date (unpinned test runners resolve as of then)

    @property
    def bin_dir(self) -> str:
        return str(self.path / "bin")

    @property
    def ro_binds(self) -> tuple[str, ...]:
        """Host dirs the sandbox must see (read-only) for the env to run: the env and its interpreter's prefix."""
        return (str(self.path), self.interpreter.prefix)

    @property
    def stamp(self) -> Path:
        """The host's record that the env is built: beside it in the cache folder, which no sandbox can write."""
        return self.path.with_name(self.key + ".ready.json")

    @property
    def overlay(self) -> Path:
        return self.path / OVERLAY

    def restore_command(self, workdir: str) -> str | None:
        """The command that puts the build's generated files into a fresh working copy, when there are any."""
        if not self.overlay.is_file():
            return None
        return f"tar -xf {shlex.quote(str(self.overlay))} -C {shlex.quote(workdir)}"

    def info(self) -> dict:
        """What the host recorded of the build ({} when the env is not built)."""
        return read_record(self.stamp) or {}

    def is_built(self) -> bool:
        return self.path.is_dir() and bool(self.info())


# Runs the build script inside the sandbox (network on, env path writable); raises SandboxError when it fails.
Builder = Callable[[str, "PyEnv"], None]

# Who hears of env builds in this context (a thread's or task's own: eval workers do not hear each other's).
_LISTENER: ContextVar[Callable[[dict], None] | None] = ContextVar("nexus_env_build_listener", default=None)


@contextmanager
def build_progress(listener: Callable[[dict], None]) -> Iterator[None]:
    """While in this block, `listener` gets an "env_build" event when a first use builds an env, then "env_built"."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def _tell(kind: str, task: Task, env: PyEnv, **more: object) -> None:
    listener = _LISTENER.get()
    if listener is not None:
        listener({"kind": kind, "repo": task.repo, "version": task.version, "key": env.key, **more})


def plan_env(task: Task, repo: Path, cfg: PyEnvConfig | None = None) -> PyEnv:
    """The env the task uses (recipe, interpreter, cache path), whether built yet or not."""
    cfg = cfg or PyEnvConfig()
    recipe = recipe_for(task, repo)
    interp = find_interpreter(recipe.python)
    key = env_key(task, recipe, interp)
    created = task.created_at if recipe.install else ""  # a shared env serves tasks of any date
    return PyEnv(cfg.cache_dir / key, key, recipe, interp, created)


def env_key(task: Task, recipe: Recipe, interp: Interpreter) -> str:
    """Cache key: repo, version, base commit (when the repo is installed), interpreter and a recipe hash."""
    digest = hashlib.sha256(f"{interp.executable}\0{interp.version}\0{recipe.digest()}".encode()).hexdigest()[:12]
    parts = [task.repo.replace("/", "__") if recipe.install else "shared", task.version or "any"]
    if recipe.install:
        parts.append(task.base_commit[:12])
    key = "__".join([*parts, f"py{interp.version}", digest])
    return re.sub(r"[^A-Za-z0-9._-]", "_", key).replace("..", "__")  # one folder name, whatever a record holds


def ensure_env(task: Task, repo: Path, cfg: PyEnvConfig | None, build: Builder) -> PyEnv:
    """The task's env, built the first time by `build` (which runs the script in the sandbox)."""
    cfg = cfg or PyEnvConfig()
    env = plan_env(task, repo, cfg)
    cfg.cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(env.path) + ".lock"):
        if not env.is_built():
            env.stamp.unlink(missing_ok=True)
            shutil.rmtree(env.path, ignore_errors=True)  # a half-built env from an interrupted run
            env.path.mkdir(parents=True)
            start, now = time.monotonic(), time.time()
            _tell("env_build", task, env)
            try:
                build(build_script(env, cfg), env)
            except BaseException:
                shutil.rmtree(env.path, ignore_errors=True)
                raise
            took = round(time.monotonic() - start, 1)
            write_record(env.stamp, built_info(env, now, took))
            _tell("env_built", task, env, seconds=took)
    return env


def built_info(env: PyEnv, started: float, seconds: float) -> dict:
    """The host's record of a finished build (PyEnv.stamp)."""
    return {"key": env.key, "recipe": env.recipe.source, "python": env.interpreter.describe(),
            "built_at": round(started), "build_s": seconds}  # fmt: skip


def build_script(env: PyEnv, cfg: PyEnvConfig) -> str:
    """The bash script that builds `env`; it runs in the sandbox, in the task's working copy (its cwd)."""
    q, r = shlex.quote, env.recipe
    pip = " ".join(["python -m pip install --disable-pip-version-check", *map(q, cfg.pip_args)])
    lines = ["set -eu", f"echo {q('nexus env: ' + env.interpreter.describe() + ', recipe: ' + r.source)}"]
    lines += [f"{q(env.interpreter.executable)} -m venv {q(str(env.path))}", f". {q(env.bin_dir)}/activate"]
    if r.requirements:
        lines += ["cat > /tmp/nexus-requirements.txt <<'NEXUS_EOF'\n" + "\n".join(r.requirements) + "\nNEXUS_EOF"]
        lines.append(f"{pip} -r /tmp/nexus-requirements.txt")
    if r.packages:
        lines.append(f"{pip} {' '.join(map(q, r.packages))}")
    for cmd in r.pre_install:
        lines.append(f"echo 'skipped (needs system packages): {cmd}'" if _is_system(cmd) else cmd)
    if r.install:
        lines.append(r.install)
    for pkg in cfg.test_packages:  # the test runner, unless the recipe brought it
        spec = as_of([pkg], env.created_at)[0]
        lines.append(f"python -c 'import {pkg}' 2>/dev/null || {pip} {q(spec)}")
    if r.install:  # a shared env (repo not installed) has no generated files of one working copy
        lines.append(_SAVE_OVERLAY.format(overlay=q(str(env.overlay))))
    return "\n".join(lines) + "\n"


# Files the build generated in the working copy (untracked or ignored), saved to be restored in later copies.
_SAVE_OVERLAY = (
    "if git rev-parse --git-dir >/dev/null 2>&1; then git ls-files --others -z | grep -zv '__pycache__/' "
    "| tar --null -T - -cf {overlay}; fi"
)


def _is_system(cmd: str) -> bool:
    """apt-get and friends cannot run in a sandbox over a read-only host root."""
    return cmd.lstrip().startswith(("apt-get", "apt ", "yum", "conda"))


def import_root(workdir: str, repo: Path) -> str:
    """Where the repo's packages live inside the sandbox: src/ for a src layout, else the repo root."""
    src = repo / "src"
    if src.is_dir() and any(p.is_dir() and (p / "__init__.py").exists() for p in src.iterdir()):
        return f"{workdir}/src"
    return workdir


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])


def sandbox_vars(env: PyEnv, workdir: str, repo: Path) -> dict[str, str]:
    """Environment variables a sandbox command gets: the env first on PATH (key "PATH": the dir to prepend)."""
    out = {"PATH": env.bin_dir, "VIRTUAL_ENV": str(env.path)}
    if not env.recipe.install:  # the repo is not installed: import its working copy
        out["PYTHONPATH"] = import_root(workdir, repo)
    return out
