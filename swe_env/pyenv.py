"""Per-repo Python environments for tasks that have no prebuilt image (bwrap, or docker without the eval image).

One virtualenv per (repo, version), cached, holding the repo's dependencies but not the repo itself: the sandbox
puts the env first on PATH and the task's own working copy on PYTHONPATH, so the second task of a repo starts
at once. The packages come from swebench's per-repo install specs when the installed swebench has them
(`MAP_REPO_VERSION_TO_SPECS`, swebench < 5), else from the repo's own metadata (`pip install .`, then the repo's
own distribution is removed again). Building an env needs PyPI; reusing one does not.
"""

from __future__ import annotations

import json
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
        if marker.exists():
            return PyEnv(path, tuple(json.loads(marker.read_text())["packages"]))
        shutil.rmtree(path, ignore_errors=True)  # a half-built env from an interrupted run
        packages = _build(task, repo, path, cfg)
        marker.write_text(json.dumps({"repo": task.repo, "version": task.version, "packages": packages}))
        return PyEnv(path, tuple(packages))


def _build(task: Task, repo: Path, path: Path, cfg: PyEnvConfig) -> list[str]:
    _run([cfg.python, "-m", "venv", str(path)], cfg, what="create the virtualenv")
    pip = [str(path / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", *cfg.pip_args]
    spec = swebench_spec(task) or {}
    packages = [*spec.get("packages", "").split(), *spec.get("pip_packages", []), *cfg.test_packages]
    packages = [p for p in packages if p and not p.endswith(".txt") and p != "environment.yml"]
    if packages:
        _run([*pip, *packages], cfg, what=f"install {' '.join(packages)}")
    if (repo / "setup.py").exists() or (repo / "pyproject.toml").exists() or (repo / "setup.cfg").exists():
        report = path / "install-report.json"
        _run([*pip, "--report", str(report), str(repo)], cfg, what=f"install {task.repo}'s requirements")
        own = _own_distribution(report, repo)
        if own:  # the sandbox imports the task's working copy instead (PYTHONPATH)
            _run([str(path / "bin" / "python"), "-m", "pip", "uninstall", "-y", own], cfg, what=f"remove {own}")
    return packages


def _own_distribution(report: Path, repo: Path) -> str | None:
    """The name pip installed the local repo under, read from pip's installation report."""
    for item in json.loads(report.read_text()).get("install", []):
        url = item.get("download_info", {}).get("url", "")
        if url.startswith("file://") and Path(url.removeprefix("file://")).resolve() == repo.resolve():
            return item["metadata"]["name"]
    return None


def import_root(workdir: str, repo: Path) -> str:
    """Where the repo's packages live inside the sandbox: src/ for a src layout, else the repo root."""
    src = repo / "src"
    if src.is_dir() and any(p.is_dir() and (p / "__init__.py").exists() for p in src.iterdir()):
        return f"{workdir}/src"
    return workdir


def _run(argv: list[str], cfg: PyEnvConfig, what: str) -> None:
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=cfg.timeout)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"Python env: could not {what} within {cfg.timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-12:])
        raise SandboxError(f"Python env: could not {what} (needs PyPI the first time):\n{tail}")
