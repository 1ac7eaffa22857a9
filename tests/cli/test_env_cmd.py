"""`nexus-agent env status|build|prune` through the typer app."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.app import app


def test_status_without_a_daemon_says_how_to_start_one(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    res = CliRunner().invoke(app, ["env", "status"], terminal_width=200)
    assert res.exit_code == 0 and "bwrap" in res.output
    assert "no Docker daemon answers" in res.output and "dockerd.sh start" in res.output


@pytest.mark.parametrize(
    "tool, package", [("bwrap", "bubblewrap"), ("debootstrap", "debootstrap"), ("dockerd", "docker.io")]
)
def test_status_names_the_package_of_each_missing_tool(monkeypatch, tmp_path, tool, package):
    """A missing tool's row says what to install (it said `apt-get install -y ...`): no tool on an empty PATH."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    monkeypatch.setenv("PATH", str(tmp_path))
    res = CliRunner().invoke(app, ["env", "status"], terminal_width=200)
    assert res.exit_code == 0, res.output
    row = next(line for line in res.output.splitlines() if f" {tool} " in line)
    assert f"missing (apt-get install -y {package})" in row


@pytest.mark.parametrize("command", [["env", "prune"], ["env", "build"]])
def test_build_and_prune_without_a_daemon_do_not_offer_the_other_sandbox(monkeypatch, tmp_path, command):
    """They work on Docker alone: the error says how to start a daemon, not "use --sandbox bwrap" (no such option)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    res = CliRunner().invoke(app, command)
    assert res.exit_code == 1 and "no Docker daemon answers" in str(res.exception), res.output
    assert "dockerd.sh start" in str(res.exception) and "--sandbox" not in str(res.exception)


@pytest.mark.docker
def test_build_is_cached_and_prune_removes_labelled_containers(docker_client, builtin_image):
    res = CliRunner().invoke(app, ["env", "build"])
    assert res.exit_code == 0 and res.output.count("present, skipped") == 2
    leftover = docker_client.containers.run(builtin_image, ["sleep", "300"], detach=True, labels={"nexus-agent": "1"})
    res = CliRunner().invoke(app, ["env", "prune"])
    assert res.exit_code == 0 and "removed" in res.output
    assert docker_client.containers.list(all=True, filters={"id": leftover.id}) == []
    status = CliRunner().invoke(app, ["env", "status"], terminal_width=200)
    assert "answers" in status.output and "nexus-agent/builtin:bookworm" in status.output
