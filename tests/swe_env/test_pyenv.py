"""Task envs built inside the sandbox: built once, reused, the repo installed editable, nothing done on the host."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from swe_env.pyenv import PyEnvConfig, build_progress, import_root
from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox
from swe_env.sandbox.common import SYSTEM_PATH
from swe_env.sandbox.docker import DockerConfig, DockerSandbox
from tasks.schema import Task

OFFLINE = dict(test_packages=(), pip_args=("--no-index",))
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
# setup.py of a packaged repo: generates a gitignored _version.py (like setuptools_scm) and tries to write on the host
SETUP_PY = """import pathlib
from setuptools import setup
pathlib.Path("widget/_version.py").write_text("version = '0.1.dev1'\\n")
try:
    pathlib.Path({probe!r}).write_text("install code ran on the host")
except OSError:
    pass
setup(name="widget", version="0.1", packages=["widget"])
"""
PROBE = "import sys, widget; print(sys.prefix); print(widget.__file__)"


def _pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=5).close()
        return True
    except OSError:
        return False


def _make_mirror(tmp_path: Path, setup_py: str | None = None, version: str = "0.1") -> tuple[Path, Task]:
    """A local mirror `acme__widget` (src layout, or a setup.py package) and a task on its only commit."""
    repo = tmp_path / "mirrors" / "acme__widget"
    pkg = repo / ("widget" if setup_py else "src/widget")
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def answer():\n    return 42\n")
    if setup_py:
        (repo / "setup.py").write_text(setup_py)
        (repo / ".gitignore").write_text("widget/_version.py\n*.egg-info/\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=repo, check=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"})
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    return repo, Task("acme__widget-1", "acme/widget", sha, "issue", version=version)


def test_env_is_built_in_the_sandbox_once_and_reused(tmp_path, bwrap_installed):
    repo, task = _make_mirror(tmp_path)
    cfg = BwrapConfig(repo_cache=repo.parent, install_tools=False, pyenv=PyEnvConfig(tmp_path / "envs", **OFFLINE))
    heard: list[dict] = []
    with build_progress(heard.append), BwrapSandbox(task, cfg) as sb:
        env = sb.python_env
        res = sb.execute(f"python -c '{PROBE}'")
        assert res.returncode == 0, res.output
        assert res.output.split() == [str(env.path), "/testbed/src/widget/__init__.py"]  # the working copy
        assert sb.execute("touch $VIRTUAL_ENV/x").returncode != 0  # the shared env is read-only at run time
        path = sb.execute("echo $PATH").output.strip().split(":")
        host_bin = str(Path(sys.executable).parent)
        assert env.bin_dir in path and (host_bin not in path or host_bin in SYSTEM_PATH)  # never the host's by accident
    info = env.info()
    assert info["key"] == env.key and env.key.startswith("shared__0.1__py") and "build_s" in info
    said = {"repo": "acme/widget", "version": "0.1", "key": env.key}  # what a live view says is being built
    assert heard == [{"kind": "env_build", **said}, {"kind": "env_built", **said, "seconds": info["build_s"]}]
    start = time.monotonic()
    with build_progress(heard.append), BwrapSandbox(task, cfg) as sb:
        assert sb.python_env.info() == info  # reused, not rebuilt
    assert time.monotonic() - start < 5.0
    assert len(heard) == 2  # a cached env is no news


def test_import_root(tmp_path):
    assert import_root("/testbed", tmp_path) == "/testbed"
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    assert import_root("/testbed", tmp_path) == "/testbed/src"


@pytest.mark.slow
def test_packaged_repo_is_installed_editable_in_the_sandbox_not_on_the_host(tmp_path, bwrap_installed):
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable (pip install -e . needs setuptools from it)")
    probe = tmp_path / "host-probe.txt"  # under /tmp: the sandbox has its own /tmp, so a write cannot land here
    repo, task = _make_mirror(tmp_path, SETUP_PY.format(probe=str(probe)))
    cfg = BwrapConfig(repo_cache=repo.parent, install_tools=False, pyenv=PyEnvConfig(tmp_path / "envs"))
    for _ in range(2):  # built by the first sandbox; the second gets a fresh working copy plus the generated files
        with BwrapSandbox(task, cfg) as sb:
            assert sb.python_env.recipe.install == "python -m pip install -e ."
            res = sb.execute(
                f"cd /tmp && python -c '{PROBE}' && python -c 'import widget._version' && pytest --version"
            )
            assert res.returncode == 0, res.output
            assert res.output.split()[:2] == [str(sb.python_env.path), "/testbed/widget/__init__.py"]
            assert "widget/_version.py" not in sb.get_patch()  # generated and ignored: never part of a patch
    assert not probe.exists(), "the repo's install code ran on the host"


@pytest.mark.docker
def test_docker_without_a_task_image_builds_the_env_in_a_build_container(tmp_path, docker_client, builtin_image):
    repo, task = _make_mirror(tmp_path, version=tmp_path.name)
    cfg = DockerConfig(
        repo_cache=repo.parent, install_tools=False, pull=False, pyenv=PyEnvConfig(tmp_path / "envs", **OFFLINE)
    )
    for _ in range(2):  # built by the first sandbox, reused by the second
        with DockerSandbox(task, cfg, client=docker_client) as sb:
            assert sb.image == builtin_image and sb.python_env
            res = sb.execute(f"python -c '{PROBE}'")
            assert res.output.split() == [str(sb.env.path), "/testbed/src/widget/__init__.py"], res.output
            assert sb.execute(f"touch {sb.env.path}/x").returncode != 0  # the shared env is read-only


def test_an_envs_folder_stays_in_the_cache_whatever_the_record_holds(tmp_path):
    from swe_env.pyenv import plan_env

    repo, task = _make_mirror(tmp_path, version="../../../../tmp/elsewhere")
    cache, cfg = tmp_path / "envs", PyEnvConfig(cache_dir=tmp_path / "envs")
    env = plan_env(task, repo, cfg)
    assert env.path.parent == cache and ".." not in env.key and "/" not in env.key and "elsewhere" in env.key
    plain = Task("a-1", "acme/widget", task.base_commit, "x", version="0.1")
    assert plan_env(plain, repo, cfg).key.startswith("shared__0.1__py")  # an ordinary key is as it was
