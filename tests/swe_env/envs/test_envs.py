"""Task environment recipes (swebench 4.x specs) and interpreter discovery: real specs, real interpreters."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from swe_env.envs.interpreters import find_interpreter
from swe_env.envs.recipes import SWEBENCH_SOURCE, _packages, host_python, recipe_for
from swe_env.pyenv import PyEnvConfig, build_script, env_key, plan_env
from swe_env.sandbox.base import SandboxError
from tasks.builtin import builtin_tasks
from tasks.schema import Task


def _task(repo: str, version: str, iid: str = "x__y-1") -> Task:
    return Task(iid, repo, "0123456789abcdef0123", "issue", version=version)


def test_swebench_recipe_for_a_real_repo_version():
    recipe = recipe_for(_task("pylint-dev/astroid", "2.9"))
    assert recipe.source == SWEBENCH_SOURCE
    assert recipe.python == "3.9"
    assert recipe.install == "python -m pip install -e ."
    assert recipe.test_cmd == "pytest -rA"
    assert "pytest" in recipe.packages


def test_requirements_file_is_read_from_the_working_copy_and_cleaned(tmp_path):
    (tmp_path / "requirements_dev.txt").write_text(
        "# tools\n-e .\nflake8\ntypes-pkg_resources\n-r extra.txt\n\n.[test]\n"
    )
    (tmp_path / "extra.txt").write_text("pytest>=6\n")
    recipe = recipe_for(_task("sqlfluff/sqlfluff", "0.8"), tmp_path)
    # swebench's own clean-up replaces the yanked types-pkg_resources
    assert recipe.requirements == ("flake8", "types-setuptools", "pytest>=6")


def test_requirements_stay_inside_the_repo_and_a_loop_ends(tmp_path):
    """Read on the host: a requirements link or `-r` out of the repo would put a host file's lines in the build."""
    repo, outside = tmp_path / "repo", tmp_path / "secret.txt"
    repo.mkdir()
    outside.write_text("host-secret\n")
    (repo / "requirements_dev.txt").write_text("flake8\n-r ../secret.txt\n-r link.txt\n-r requirements_dev.txt\n")
    (repo / "link.txt").symlink_to(outside)
    recipe = recipe_for(_task("sqlfluff/sqlfluff", "0.8"), repo)
    assert recipe.requirements == ("flake8",)


def test_a_requirements_file_that_is_a_link_out_of_the_repo_is_not_read(tmp_path):
    repo, outside = tmp_path / "repo", tmp_path / "secret.txt"
    repo.mkdir()
    outside.write_text("host-secret\n")
    (repo / "requirements_dev.txt").symlink_to(outside)
    assert recipe_for(_task("sqlfluff/sqlfluff", "0.8"), repo).requirements == ()


def test_conda_pins_become_pip_pins():
    spec = {"packages": "numpy=1.19 scipy==1.5 cython", "pip_packages": ["pytest==7.0"]}
    assert _packages(spec) == ["numpy==1.19", "scipy==1.5", "cython", "pytest==7.0"]
    assert _packages({"packages": "requirements.txt"}) == []


def test_builtin_and_unknown_repos_get_the_fallback_recipe(tmp_path):
    builtin = recipe_for(builtin_tasks()[0])
    assert builtin.source == "built-in"
    assert builtin.python == host_python()
    assert builtin.install == ""
    (tmp_path / "pyproject.toml").write_text("[project]\nname='w'\n")
    unknown = recipe_for(_task("acme/widget", "9.9"), tmp_path)
    assert unknown.source.startswith("fallback")
    assert unknown.install == "python -m pip install -e ."


def test_env_key_holds_interpreter_and_recipe():
    task = _task("pylint-dev/astroid", "2.9")
    env = plan_env(task, Path("/nonexistent"), PyEnvConfig(cache_dir=Path("/x")))
    assert env.interpreter.version.startswith("3.9.")
    assert env.key.startswith("pylint-dev__astroid__2.9__0123456789ab")
    changed = replace(env.recipe, packages=(*env.recipe.packages, "lazy-object-proxy==1.4"))
    assert env_key(task, changed, env.interpreter) != env.key  # a changed recipe never reuses a stale env
    other_python = replace(env.interpreter, executable="/opt/other/python3.9")
    assert env_key(task, env.recipe, other_python) != env.key


def test_interpreter_of_the_host_version_is_found():
    interp = find_interpreter(host_python())
    assert interp.version.startswith(host_python() + ".")
    assert interp.origin in ("pyenv", "uv", "system")
    assert Path(interp.executable).is_file()
    assert Path(interp.prefix).is_dir()


def test_a_missing_interpreter_is_one_clear_line():
    with pytest.raises(SandboxError) as err:
        find_interpreter("2.5")
    assert "Python 2.5" in str(err.value)
    assert "\n" not in str(err.value)


def test_build_script_installs_the_repo_and_keeps_it():
    task = _task("pylint-dev/astroid", "2.9")
    env = plan_env(task, Path("/nonexistent"), PyEnvConfig(cache_dir=Path("/x")))
    script = build_script(env, PyEnvConfig())
    assert "python -m pip install -e ." in script
    assert "uninstall" not in script
    assert f"{env.interpreter.executable} -m venv {env.path}" in script
    assert "overlay.tar" in script


def test_unpinned_test_runner_resolves_as_of_the_task_date():
    old = recipe_for(
        Task("p__d-1", "pydicom/pydicom", "0" * 40, "issue", version="2.0", created_at="2020-09-22T03:16:19Z")
    )
    assert "pytest<8" in old.packages
    assert "pytest" not in old.packages  # pytest 8 dropped nose-style setup()
    new = recipe_for(Task("p__d-2", "pydicom/pydicom", "0" * 40, "issue", version="2.0", created_at="2024-06-01"))
    assert "pytest" in new.packages


def test_build_gets_only_the_index_the_user_chose(monkeypatch):
    from swe_env.sandbox.index_proxy import allowed_hosts, pip_environment, shown

    for key, value in {"PIP_INDEX_URL": "https://u:tok@mirror/simple", "HTTPS_PROXY": "http://u:tok@p:3128"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("NEXUS_PIP_INDEX_URL", raising=False)
    env = pip_environment(PyEnvConfig().index_url)
    assert env["PIP_INDEX_URL"] == "https://pypi.org/simple"
    assert "tok" not in " ".join(env.values())
    assert env["PIP_CONFIG_FILE"] == os.devnull  # no pip.conf of the host's either
    monkeypatch.setenv("NEXUS_PIP_INDEX_URL", "https://mirror.example:8443/simple")
    monkeypatch.setenv("NEXUS_PIP_INDEX_HOSTS", "files.example")
    cfg = PyEnvConfig()
    assert allowed_hosts(cfg.index_url, cfg.index_hosts) == {("mirror.example", 8443), ("files.example", 443)}
    assert allowed_hosts("https://pypi.org/simple") == {("pypi.org", 443), ("files.pythonhosted.org", 443)}
    assert shown("https://u:tok@mirror.example/simple") == "https://mirror.example/simple"  # messages hide the token
    with pytest.raises(SandboxError, match="https"):
        allowed_hosts("http://localhost:3141/simple")
