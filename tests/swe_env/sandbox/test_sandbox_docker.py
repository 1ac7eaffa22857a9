"""The docker backend against a real daemon (skipped without one, failed instead when NEXUS_REQUIRE_DOCKER=1)."""

from __future__ import annotations

import pytest
import sandbox_checks as checks

from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.docker import DockerConfig, DockerSandbox, image_for, swebench_image
from tasks import get_task
from tasks.schema import Task

pytestmark = pytest.mark.docker
TASK_ID = "nexus-demo__semver-lite-1"


@pytest.fixture
def sandbox(docker_client, builtin_image):
    with DockerSandbox(get_task(TASK_ID), client=docker_client) as sb:
        yield sb


def test_basics_and_tools(sandbox):
    checks.check_basics(sandbox)
    checks.check_tools(sandbox)
    assert sandbox.execute("git status --porcelain").output == ""  # the copied-in repo is clean at base commit
    assert sandbox.execute("git rev-parse HEAD").output.strip() == sandbox.task.base_commit


def test_network_is_off(sandbox):
    checks.check_network_off(sandbox)


def test_timeout_keeps_sandbox_usable(sandbox):
    checks.check_timeout_keeps_sandbox(sandbox)


def test_output_held_open_by_a_background_child_does_not_hang(sandbox):
    res = sandbox.execute("sleep 3021 & echo bg", timeout=2)
    assert "bg" in res.output
    assert sandbox.execute("echo alive").output == "alive\n"


def test_files_and_patch(sandbox):
    checks.check_files_and_patch(sandbox)


def test_limits_and_labels(sandbox, docker_client):
    attrs = docker_client.api.inspect_container(sandbox.container.id)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["Memory"] == 8 * 1024**3
    assert host["PidsLimit"] == 1024
    assert attrs["Config"]["Labels"]["nexus-agent"] == "1"


def test_close_removes_the_container(docker_client, builtin_image):
    sb = DockerSandbox(get_task(TASK_ID), DockerConfig(install_tools=False), client=docker_client)
    cid = sb.container.id
    sb.execute("sleep 3022 &")
    sb.close()
    assert docker_client.containers.list(all=True, filters={"id": cid}) == []
    assert checks.host_processes("sleep 3022") == []
    with pytest.raises(SandboxError, match="closed"):
        sb.execute("true")


def test_container_is_removed_when_start_fails(docker_client, builtin_image):
    before = {c.id for c in docker_client.containers.list(all=True)}
    with pytest.raises(SandboxError):
        DockerSandbox(get_task(TASK_ID), DockerConfig(tools_dir="/proc/not-writable"), client=docker_client)
    assert {c.id for c in docker_client.containers.list(all=True)} == before


def test_missing_image_is_a_clear_error(docker_client):
    with pytest.raises(SandboxError, match="nexus-agent/no-such-image:1 is not in the local daemon"):
        DockerSandbox(get_task(TASK_ID), DockerConfig(image="nexus-agent/no-such-image:1"), client=docker_client)


def test_image_names():
    task = Task("astropy__astropy-12907", "astropy/astropy", "abc", "issue")
    assert image_for(task) == swebench_image(task.instance_id)
    assert image_for(task) == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert image_for(Task("x", "o/n", "abc", "i", docker_image="r2e/img:1")) == "r2e/img:1"
    assert image_for(get_task(TASK_ID)) == "nexus-agent/builtin:bookworm"


def test_no_daemon_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(SandboxError, match="no Docker daemon answers.*scripts/dockerd.sh start"):
        DockerSandbox(get_task(TASK_ID))


def test_a_forgotten_container_is_removed_at_exit(docker_client, builtin_image):
    cid = checks.forgotten_sandbox_output("docker")
    assert len(cid) == 64
    assert docker_client.containers.list(all=True, filters={"id": cid}) == []
