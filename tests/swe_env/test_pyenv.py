"""Per-repo Python envs, offline: a local repo with no dependencies -> env built once, cached, used by bwrap."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from swe_env.pyenv import PyEnvConfig, ensure_env, env_key, import_root
from swe_env.pyenv_docker import volume_name
from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox
from swe_env.sandbox.docker import DockerConfig, DockerSandbox
from tasks.schema import Task

OFFLINE = dict(test_packages=(), pip_args=("--no-index",))
PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "widget"
version = "0.1"
"""


def _pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=5).close()
        return True
    except OSError:
        return False


def _make_mirror(tmp_path: Path, packaged: bool, version: str = "0.1") -> tuple[Path, Task]:
    """A local mirror `acme__widget` (src layout; with a pyproject when packaged) and a task on its only commit."""
    repo = tmp_path / "mirrors" / "acme__widget"
    (repo / "src" / "widget").mkdir(parents=True)
    if packaged:
        (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "src" / "widget" / "__init__.py").write_text("def answer():\n    return 42\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=repo, check=True, env={**env, "PATH": "/usr/bin:/bin"})
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    return repo, Task("acme__widget-1", "acme/widget", sha, "issue", version=version)


@pytest.fixture
def mirror(tmp_path) -> tuple[Path, Task]:
    return _make_mirror(tmp_path, packaged=False)


def test_env_is_built_once_and_reused(mirror, tmp_path):
    repo, task = mirror
    cfg = PyEnvConfig(cache_dir=tmp_path / "envs", **OFFLINE)
    env = ensure_env(task, repo, cfg)
    assert env.path == tmp_path / "envs" / env_key(task) and (env.path / "bin" / "python").exists()
    start = time.monotonic()
    again = ensure_env(task, repo, cfg)
    assert again == env and time.monotonic() - start < 1.0


def test_bwrap_uses_the_env_and_imports_the_working_copy(mirror, tmp_path, bwrap_installed):
    repo, task = mirror
    cfg = BwrapConfig(
        repo_cache=repo.parent, install_tools=False, pyenv=PyEnvConfig(cache_dir=tmp_path / "e", **OFFLINE)
    )
    with BwrapSandbox(task, cfg) as sb:
        res = sb.execute("python -c 'import sys, widget; print(sys.prefix); print(widget.__file__)'")
    assert res.returncode == 0, res.output
    assert res.output.split() == [str(tmp_path / "e" / env_key(task)), "/testbed/src/widget/__init__.py"]


def test_import_root(tmp_path):
    assert import_root("/testbed", tmp_path) == "/testbed"
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    assert import_root("/testbed", tmp_path) == "/testbed/src"


@pytest.mark.slow
def test_packaged_repo_gets_its_requirements_but_not_itself(tmp_path):
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable (building an env from repo metadata needs it)")
    repo, task = _make_mirror(tmp_path, packaged=True)
    env = ensure_env(task, repo, PyEnvConfig(cache_dir=tmp_path / "envs"))
    site = next((env.path / "lib").glob("python3*/site-packages"))
    assert list(site.glob("pytest")), "the test runner is installed"
    assert not list(site.glob("widget*")), "the repo itself must not be installed: the sandbox imports its copy"


@pytest.mark.docker
def test_docker_without_a_task_image_uses_a_cached_env_volume(tmp_path, docker_client, builtin_image):
    repo, task = _make_mirror(tmp_path, packaged=False, version=tmp_path.name)  # a fresh volume for this run
    cfg = DockerConfig(repo_cache=repo.parent, install_tools=False, pyenv=PyEnvConfig(cache_dir=tmp_path, **OFFLINE))
    try:
        for _ in range(2):  # built by the first sandbox, reused by the second
            with DockerSandbox(task, cfg, client=docker_client) as sb:
                assert sb.image == builtin_image and sb.python_env
                res = sb.execute("python -c 'import sys, widget; print(sys.prefix); print(widget.__file__)'")
                assert res.output.split() == ["/opt/nexus-pyenv", "/testbed/src/widget/__init__.py"], res.output
                assert sb.execute("touch /opt/nexus-pyenv/x").returncode != 0  # the shared env is read-only
    finally:
        docker_client.volumes.get(volume_name(task)).remove(force=True)
