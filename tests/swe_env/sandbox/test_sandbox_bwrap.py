"""The bubblewrap backend, for real: isolation, timeouts, files, patch, clean-up."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import sandbox_checks as checks

from swe_env.sandbox.base import SandboxError
from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox
from tasks import get_task

TASK_ID = "nexus-demo__semver-lite-1"


@pytest.fixture
def sandbox(bwrap_installed):
    with BwrapSandbox(get_task(TASK_ID)) as sb:
        yield sb


def test_basics_and_tools(sandbox):
    checks.check_basics(sandbox)
    checks.check_tools(sandbox)


def test_network_is_off(sandbox):
    checks.check_network_off(sandbox)


def test_timeout_keeps_sandbox_usable(sandbox):
    checks.check_timeout_keeps_sandbox(sandbox)


def test_files_and_patch(sandbox):
    checks.check_files_and_patch(sandbox)


def test_only_testbed_and_tmp_are_writable(sandbox):
    # host places that exist outside /tmp (the checkout may live under /tmp, which is private in the sandbox)
    home = Path.home()
    res = sandbox.execute(f"touch /etc/nexus-probe; touch {home}/nexus-probe; touch {sandbox.tools_dir}/x")
    assert res.output.count("Read-only file system") == 3, res.output
    assert not Path("/etc/nexus-probe").exists()
    assert not (home / "nexus-probe").exists()
    assert sandbox.execute("touch /testbed/ok /tmp/ok && echo fine").output == "fine\n"
    with pytest.raises(SandboxError, match="writable"):
        sandbox.write_file("/etc/nexus-probe", "x")
    assert not Path("/testbed").exists()  # the host never gets the mount points


def test_environment_is_cleared(bwrap_installed, monkeypatch):
    monkeypatch.setenv("NEXUS_LEAK_PROBE", "secret")
    with BwrapSandbox(get_task(TASK_ID), BwrapConfig(install_tools=False)) as sb:
        env = sb.execute("env").output
    assert "NEXUS_LEAK_PROBE" not in env
    assert "LANG=C.UTF-8" in env


def test_background_processes_die_with_the_command(sandbox):
    sandbox.execute("sleep 3011 & echo started")
    assert checks.host_processes("sleep 3011") == []


def test_close_removes_everything(bwrap_installed):
    sb = BwrapSandbox(get_task(TASK_ID))
    root = sb.repo.parent
    sb.execute("(sleep 3012 &) ; sleep 3013", timeout=0.5)
    sb.close()
    assert not root.exists()
    assert checks.host_processes("sleep 301") == []
    with pytest.raises(SandboxError, match="closed"):
        sb.execute("true")


def test_ctrl_c_kills_the_running_command(sandbox):
    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            sandbox.execute("sleep 3014", timeout=30)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert checks.host_processes("sleep 3014") == []


def test_missing_bubblewrap_says_how_to_install():
    with pytest.raises(SandboxError, match="apt-get install -y bubblewrap"):
        BwrapSandbox(get_task(TASK_ID), BwrapConfig(bwrap="no-such-bwrap-binary"))


def test_runs_as_the_calling_user(sandbox):
    assert sandbox.execute("id -u").output.strip() == str(os.getuid())


def test_a_forgotten_sandbox_is_removed_at_exit(bwrap_installed):
    root = checks.forgotten_sandbox_output("bwrap")
    assert root.startswith("/tmp/nexus-bwrap-")
    assert not Path(root).exists()


def test_works_under_a_temp_dir_only_root_can_enter(bwrap_installed, tmp_path, monkeypatch):
    """An eval points TMPDIR at its own 0700 run folder: the workspace lies where the sandbox's user (not root)
    cannot walk, so its repo and /tmp are staged too, and the staging folders are gone after close."""
    import tempfile

    private = tmp_path / "nexus-run-private"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    sb = BwrapSandbox(get_task("nexus-demo__semver-lite-1"))
    try:
        assert sb._root.is_relative_to(private)
        res = sb.execute("echo edit >> README.md && touch /tmp/x && python -m pytest -q 2>&1 | tail -1")
        assert res.returncode == 0, res.output
        assert "passed" in res.output, res.output
        assert "README.md" in sb.get_patch()
        stages = [s.stage_dir for s in sb._stages.values() if s.stage_dir is not None]
    finally:
        sb.close()
    assert all(not s.exists() for s in stages)
