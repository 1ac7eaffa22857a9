"""Per-repo Python environments for tasks that have no prebuilt image (bwrap, or docker without the eval image).

One virtualenv per (repo, version), cached, holding the repo's dependencies but not the repo itself: the sandbox
puts the env first on PATH and the task's own working copy on PYTHONPATH, so the second task of a repo starts
at once. The packages come from swebench's per-repo install specs when the installed swebench has them
(`MAP_REPO_VERSION_TO_SPECS`, swebench < 5), else from the repo's own metadata (`pip install .`, then the repo's
own distribution is removed again). Building an env needs PyPI; reusing one does not.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from swe_env.sandbox.base import SandboxError
from swe_env.testspec import swebench_spec
from tasks.schema import Task

READY = ".nexus-ready"


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "nexus-agent" / "pyenvs"


@dataclass
class PyEnvConfig:
    """Where and how per-repo Python environments are built."""

    cache_dir: Path = field(default_factory=default_cache_dir)  # one subdir per (repo, version)
    python: str = sys.executable  # interpreter the virtualenvs are made from
    test_packages: tuple[str, ...] = ("pytest",)  # installed into every env (the test runner)
    pip_args: tuple[str, ...] = ()  # extra arguments for every pip install (e.g. an index URL)
    timeout: float = 3600.0  # seconds one pip install may take


@dataclass(frozen=True)
class PyEnv:
    """A ready environment and how a sandbox uses it."""

    path: Path  # the virtualenv
    packages: tuple[str, ...]  # what was installed besides the repo's own requirements

    @property
    def bin_dir(self) -> str:
        return str(self.path / "bin")


def env_key(task: Task) -> str:
    return f"{task.repo.replace('/', '__')}__{task.version or task.environment_setup_commit[:12] or 'default'}"


def ensure_env(task: Task, repo: Path, cfg: PyEnvConfig | None = None) -> PyEnv:
    """The cached env for the task's (repo, version), built from the working copy `repo` the first time."""
    cfg = cfg or PyEnvConfig()
    cfg.cache_dir.mkdir(parents=True, exist_ok=True)
    path = cfg.cache_dir / env_key(task)
    with FileLock(str(path) + ".lock"):
        marker = path / READY
        if not marker.exists():
            shutil.rmtree(path, ignore_errors=True)  # a half-built env from an interrupted run
            _run(build_script(task, repo, str(path), cfg.python, cfg), cfg)
        return PyEnv(path, tuple(json.loads(marker.read_text())["packages"]))


def packages_for(task: Task, cfg: PyEnvConfig) -> list[str]:
    """What to install besides the repo's own requirements: swebench's spec packages, then the test runner."""
    spec = swebench_spec(task) or {}
    packages = [*spec.get("packages", "").split(), *spec.get("pip_packages", []), *cfg.test_packages]
    return [p for p in packages if p and not p.endswith(".txt") and p != "environment.yml"]


def build_script(task: Task, repo: Path, env: str, python: str, cfg: PyEnvConfig, repo_at: str | None = None) -> str:
    """A bash script that builds the env at `env` (a host path, or one inside a container).

    `repo` is the host working copy (read to see whether it is a package); `repo_at` is where the script sees it.
    """
    q = shlex.quote
    where = repo_at or str(repo)
    py = f"{q(env)}/bin/python"
    pip = " ".join([py, "-m pip install --disable-pip-version-check", *map(q, cfg.pip_args)])
    packages = packages_for(task, cfg)
    lines = ["set -eu", f"{q(python)} -m venv {q(env)}"]
    if packages:
        lines.append(f"{pip} {' '.join(map(q, packages))}")
    if any((repo / f).exists() for f in ("setup.py", "pyproject.toml", "setup.cfg")):
        report = f"{q(env)}/install-report.json"
        lines.append(f"{pip} --report {report} {q(where)}")
        # the sandbox imports the task's working copy instead (PYTHONPATH), so the repo itself goes again
        lines.append(f"own=$({py} -c {q(_OWN_DIST)} {report} {q(where)})")
        lines.append(f'if [ -n "$own" ]; then {py} -m pip uninstall -y "$own"; fi')
    info = json.dumps({"repo": task.repo, "version": task.version, "packages": packages})
    lines.append(f"printf '%s' {q(info)} > {q(env)}/{READY}")
    return "\n".join(lines) + "\n"


# Prints the name pip installed the local repo (argv[2]) under, read from pip's report (argv[1]).
_OWN_DIST = """import json, pathlib, sys
repo = pathlib.Path(sys.argv[2]).resolve()
for item in json.load(open(sys.argv[1])).get("install", []):
    url = item.get("download_info", {}).get("url", "")
    if url.startswith("file://") and pathlib.Path(url[7:]).resolve() == repo:
        print(item["metadata"]["name"])
"""


def import_root(workdir: str, repo: Path) -> str:
    """Where the repo's packages live inside the sandbox: src/ for a src layout, else the repo root."""
    src = repo / "src"
    if src.is_dir() and any(p.is_dir() and (p / "__init__.py").exists() for p in src.iterdir()):
        return f"{workdir}/src"
    return workdir


def _run(script: str, cfg: PyEnvConfig) -> None:
    try:
        proc = subprocess.run(
            ["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=cfg.timeout
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(f"Python env: not built within {cfg.timeout:.0f} s") from None
    if proc.returncode != 0:
        raise SandboxError(f"Python env: build failed (it needs PyPI the first time):\n{tail(proc.stdout)}")


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.splitlines()[-lines:])
