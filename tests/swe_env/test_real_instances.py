"""Real SWE-bench Lite instances end to end, offline from the shared git bundles: gold resolves, others do not.

The instance's env (swebench 4.x recipe: Python 3.9 from pyenv/uv/system, `pip install -e .`) is built inside the
sandbox the first time, from PyPI, and cached (~/.cache/nexus-agent/pyenvs); later runs reuse it. Measured here
(2 shared cores): astroid-1268 ~25 s to build + grade the first time, ~10 s per grade after; sqlfluff-2386 ~70 s
/ ~25 s.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from shared_data import shared_path

from swe_env.grading import GradeConfig, grade
from swe_env.pyenv import PyEnvConfig, plan_env
from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.factory import SandboxConfig
from tasks.schema import Task

pytestmark = pytest.mark.slow
INSTANCES = ["pylint-dev__astroid-1268", "sqlfluff__sqlfluff-2386"]  # the two the shared bundles cover


def _task(instance_id: str) -> Task:
    path = shared_path("swebench", "swe-bench-lite-dev-sample.jsonl")
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["instance_id"] == instance_id:
            return Task.from_record(rec, str(path))
    pytest.skip(f"{instance_id} is not in {path}")


def _env_buildable(task: Task) -> None:
    """Skip when the env is neither cached nor buildable (no PyPI) or the recipe's Python is not installed."""
    try:
        env = plan_env(task, shared_path("repos"), PyEnvConfig())
    except SandboxError as exc:
        pytest.skip(str(exc))
    if (env.path / ".nexus-ready").exists():
        return
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=5).close()
    except OSError:
        pytest.skip(f"{task.instance_id}: its env is not cached and PyPI is unreachable to build it")


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request) -> str:
    request.getfixturevalue("builtin_image" if request.param == "docker" else "bwrap_installed")
    return request.param


@pytest.mark.parametrize("instance_id", INSTANCES)
def test_gold_resolves_and_the_unfixed_code_does_not(instance_id, backend):
    task = _task(instance_id)
    _env_buildable(task)
    sandbox = SandboxConfig(repo_cache=shared_path("repos"), install_tools=False)
    cfg = GradeConfig(backend=backend, sandbox=sandbox, test_timeout=900)
    gold = grade(task, task.patch, config=cfg)
    assert gold.status == "resolved", (gold.error, gold.log_excerpt[-3000:])
    assert gold.backend == backend and set(gold.fail_to_pass.values()) == {"PASSED"}
    assert gold.test_cmd.startswith("pytest -rA ")  # swebench's runner for these repos
    unfixed = grade(task, task.test_patch, config=cfg)  # only the tests change: the bug is still there
    assert unfixed.status == "unresolved", (unfixed.error, unfixed.log_excerpt[-3000:])
    assert any(v != "PASSED" for v in unfixed.fail_to_pass.values())
    assert grade(task, "", config=cfg).status == "empty_patch"
