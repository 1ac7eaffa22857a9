"""The Python environment of a chat's sandbox, so that the agent can run the repo's own tests.

A virtualenv per user repo, from the host's Python version (swe_env.envs.interpreters): the repo installed editable
when it is a package (setup.py, pyproject.toml or setup.cfg: its dependencies come with it), else its
requirements.txt; and pytest. It is built inside a bubblewrap sandbox on the repo, as an agent's step runs (the
sandbox's user, a step's limits, its own network namespace) whose only way out is a proxy to the package index
(PyPI, or NEXUS_PIP_INDEX_URL: swe_env/sandbox/index_proxy.py), so the repo's install code never runs on the host
and reaches nothing of it. The env is then root's, read-only in every chat sandbox, which binds it and the
interpreter nexus-agent chose for it as they are (never what the env's pyvenv.cfg names); the host records that it
is built in the cache folder, never in the env (swe_env.pyenv: PyEnv.stamp). It is cached under the task
envs' folder (swe_env.pyenv.default_cache_dir) as `chat__<repo>__<hash of its path>__py<version>__<hash of its
packaging files>`: a later chat on the same repo reuses it, a changed setup.py or pyproject.toml builds a new one
(the old one is removed). A repo that is not a package shares one env with the repos of the same requirements.txt
(`chat__shared__py<version>__<hash>`). The chat's sandbox sees it read-only, first on PATH after the agent's tools.

Unlike a task env, nothing of the build is saved and restored into the working copy (a task's overlay): the
build's generated files (`*.egg-info`) stay in the user's repo, as a `pip install -e .` there would leave them.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from filelock import FileLock

from pipeline.chat.snapshot import read_inside
from pipeline.files import safe_name
from swe_env.envs.interpreters import find_interpreter
from swe_env.envs.recipes import Recipe, host_python
from swe_env.pyenv import PyEnv, PyEnvConfig, built_info, import_root
from swe_env.records import write_record
from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox
from swe_env.sandbox.index_proxy import shown
from tasks.schema import Task

PREFIX = "chat__"
PACKAGING = ("setup.py", "pyproject.toml", "setup.cfg")
REQUIREMENTS = "requirements.txt"
KEY_FILES = (*PACKAGING, REQUIREMENTS)  # files whose content is part of the env's key


def plan(repo: Path, cfg: PyEnvConfig | None = None) -> PyEnv:
    """The env of `repo` (built or not): its recipe, interpreter and cache folder."""

    cfg = cfg or PyEnvConfig()
    found = {name: read_inside(repo, name) for name in KEY_FILES}  # never through a link the agent planted
    if any(found[f] is not None for f in PACKAGING):
        recipe = Recipe(host_python(), install="python -m pip install -e .", source="the repo installed editable")
    elif found[REQUIREMENTS] is not None:
        lines = found[REQUIREMENTS].decode(errors="replace").splitlines()
        reqs = tuple(x.strip() for x in lines if x.strip() and not x.lstrip().startswith(("#", "-e")))
        recipe = Recipe(host_python(), requirements=reqs, source=f"its {REQUIREMENTS} installed")
    else:
        recipe = Recipe(host_python(), source="none of its packages: not a package, no requirements.txt")
    interp = find_interpreter(recipe.python)
    files = hashlib.sha256()
    for name in KEY_FILES:
        files.update(name.encode() + b"\0" + (found[name] or b"") + b"\0")
    files.update(f"{interp.executable}\0{recipe.digest()}\0{' '.join(cfg.test_packages)}".encode())
    if recipe.install:  # the repo itself is in it: one env per repo
        where = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:10]
        key = f"{PREFIX}{safe_name(repo.name)[:40]}__{where}__py{interp.version}__{files.hexdigest()[:10]}"
    else:  # packages only: repos with the same requirements share it
        key = f"{PREFIX}shared__py{interp.version}__{files.hexdigest()[:10]}"
    return PyEnv(cfg.cache_dir / key, key, recipe, interp)


def build_script(env: PyEnv, cfg: PyEnvConfig) -> str:
    """The bash script that builds `env` in the sandbox, in the repo (its cwd)."""
    q, r = shlex.quote, env.recipe
    pip = " ".join(["python -m pip install --disable-pip-version-check --progress-bar off", *map(q, cfg.pip_args)])
    lines = ["set -eu", f"{q(env.interpreter.executable)} -m venv {q(str(env.path))}", f". {q(env.bin_dir)}/activate"]
    if r.requirements:
        lines.append(f"{pip} {' '.join(map(q, r.requirements))}")
    if r.install:
        lines.append(r.install)
    for pkg in cfg.test_packages:
        lines.append(f"python -c {q('import ' + pkg)} 2>/dev/null || {pip} {q(pkg)}")
    return "\n".join(lines) + "\n"


def ensure(repo: Path, cfg: PyEnvConfig | None, status: Callable[[str], AbstractContextManager]) -> PyEnv:
    """The repo's env, built the first time (`status(text)`: shows progress while it builds). SandboxError when the
    build fails (no PyPI, an install error)."""

    cfg = cfg or PyEnvConfig()
    env = plan(repo, cfg)
    cfg.cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(env.path) + ".lock"):
        if env.is_built():
            return env
        env.stamp.unlink(missing_ok=True)
        shutil.rmtree(env.path, ignore_errors=True)  # a half-built env of an interrupted chat
        env.path.mkdir(parents=True)
        task = Task(instance_id=f"chat-env:{repo.name}", repo=f"local/{repo.name}", base_commit="HEAD",
                    problem_statement="build the chat's Python env")  # fmt: skip
        start, now = time.monotonic(), time.time()
        box = BwrapConfig(python_env=False, install_tools=False, pyenv=cfg)
        what = f"{env.recipe.source}; pip needs {shown(cfg.index_url)}"
        try:
            with status(f"building the Python env of {repo} once ({what}) ..."):
                with BwrapSandbox(task, box, repo=repo) as sandbox:
                    sandbox.build_env(build_script(env, cfg), env)
        except BaseException:
            shutil.rmtree(env.path, ignore_errors=True)
            raise
        write_record(env.stamp, built_info(env, now, round(time.monotonic() - start, 1)))
    if env.recipe.install:
        _remove_older(env, cfg)
    return env


def _remove_older(env: PyEnv, cfg: PyEnvConfig) -> None:
    """Envs of the same repo with other packaging files (older builds): removed once a new one is ready."""
    stem = env.key.rsplit("__", 2)[0]  # chat__<repo>__<path hash>
    for other in cfg.cache_dir.glob(f"{stem}__*"):
        if other.is_dir() and other.name != env.key:
            other.with_name(other.name + ".ready.json").unlink(missing_ok=True)
            shutil.rmtree(other, ignore_errors=True)
            Path(str(other) + ".lock").unlink(missing_ok=True)


def sandbox_settings(env: PyEnv | None, repo: Path) -> dict:
    """BwrapConfig keyword arguments that put `env` on the sandbox's PATH (nothing when there is no env): its
    folder and its interpreter's prefix bound as they are (nothing the build wrote names a host folder)."""
    if env is None:
        return {}

    extra = [("VIRTUAL_ENV", str(env.path))]
    if not env.recipe.install:  # the repo is not installed: its working copy is importable
        extra.append(("PYTHONPATH", import_root("/testbed", repo)))
    return {"extra_path": (env.bin_dir,), "env_dirs": env.ro_binds, "extra_env": tuple(extra)}


def describe(env: PyEnv | None) -> str:
    """One line on the env for the chat's start."""
    if env is None:
        return "no Python env (python3 of the system only, no pytest)"
    info = env.info()
    built = f", built in {info['build_s']} s" if "build_s" in info else ""
    return f"a Python {env.interpreter.version} env with pytest ({env.recipe.source}{built}) at {env.path}"
