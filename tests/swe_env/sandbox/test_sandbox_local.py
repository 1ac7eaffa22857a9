"""The unisolated local backend and the backend factory."""

from __future__ import annotations

import pytest
import sandbox_checks as checks

from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.factory import SandboxConfig, open_sandbox, pick_backend
from swe_env.sandbox.local import LocalSandbox
from tasks import get_task

TASK_ID = "nexus-demo__semver-lite-1"


def test_local_sandbox_runs_in_a_private_copy():
    task = get_task(TASK_ID)
    with open_sandbox(task, backend="local") as sb:
        assert isinstance(sb, LocalSandbox)
        assert sb.workdir.startswith("/tmp/nexus-local-")
        checks.check_basics(sb)
        checks.check_tools(sb)
        checks.check_timeout_keeps_sandbox(sb)
        checks.check_files_and_patch(sb)
        root = sb.repo.parent
    assert not root.exists()


def test_local_timeout_kills_the_process_group():
    with open_sandbox(get_task(TASK_ID), backend="local") as sb:
        res = sb.execute("sleep 3031 & sleep 3032", timeout=0.5)
    assert res.timed_out
    assert checks.host_processes("sleep 303") == []


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(SandboxError, match="unknown sandbox backend 'podman'"):
        open_sandbox(get_task(TASK_ID), backend="podman")


def test_auto_falls_back_to_bwrap_without_a_daemon(monkeypatch, tmp_path, bwrap_installed):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    task = get_task(TASK_ID)
    assert pick_backend(task) == "bwrap"
    with open_sandbox(task, config=SandboxConfig(install_tools=False)) as sb:
        assert type(sb).__name__ == "BwrapSandbox"
        assert sb.execute(f"ls {sb.tools_dir}").output == ""  # the shared config reached the backend


def test_auto_picks_docker_when_the_image_is_there(builtin_image):
    assert pick_backend(get_task(TASK_ID)) == "docker"
