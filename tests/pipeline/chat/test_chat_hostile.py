"""Hostile commands in the sandbox `nexus-agent chat` opens on the user's own repo (issue 62, items 5-7), run as root
as the review ran them: each test fails if its attack works.

- a setuid/setgid file the agent makes must never exist on the host, even while the step still runs, and the
  sandbox never holds host gid 0;
- the repo stays its owner's while the session runs (root's own git keeps working in it), and a kill -9 of the
  chat leaves nothing for the next command to repair;
- the repo's .git is read-only to the agent: no planted config or hook reaches the user's own git.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

MARK = uuid.uuid4().hex[:10]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


@pytest.fixture(autouse=True)
def _root_and_bwrap(request):
    request.getfixturevalue("bwrap_installed")
    if os.geteuid() != 0:
        pytest.skip("needs root: the review ran as root, and the repo owners are made with chown")


def _user_repo(tmp_path: Path, uid: int, gid: int) -> Path:
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "app.py").write_text("print('hi')\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "base"], check=True)
    for p in [repo, *repo.rglob("*")]:
        os.lchown(p, uid, gid)
    tmp_path.chmod(0o755)
    return repo


def _open(repo: Path):
    from pipeline.chat import open_repo_sandbox

    return open_repo_sandbox(repo, "hostile")


def _host_gids(marker: str) -> set[int]:
    """The host gids of the sandbox's processes (bwrap and the step's shell) whose command line holds marker; root's
    launcher (the cgroup shell, nsenter, setpriv) is left out: it drops to the sandbox's user before bwrap."""
    out = subprocess.run(["ps", "-wweo", "gid=,args="], capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines() if marker in line]
    return {int(row[0]) for row in rows if len(row) == 3 and Path(row[1]).name in ("bwrap", "bash")}


SETID_STEP = (
    "cp /bin/bash .s; chmod 6755 .s; install -m 4755 /bin/true .i; "
    "python3 -c 'import os; os.close(os.open(\"/testbed/.o\", os.O_CREAT | os.O_WRONLY, 0o6755))'; "
    f"echo made; sleep 4; echo {MARK}"
)


@pytest.mark.parametrize("owner", [(4242, 0), (0, 0)], ids=["user-owned-root-group", "root-owned"])
def test_no_setuid_file_exists_on_the_host_while_the_step_runs(tmp_path, owner):
    repo = _user_repo(tmp_path, *owner)
    sb = _open(repo)
    seen: dict[str, int] = {}
    gids: set[int] = set()
    try:
        step = threading.Thread(target=lambda: sb.execute(SETID_STEP, timeout=30))
        step.start()
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            for name in (".s", ".i", ".o"):
                try:
                    mode = (repo / name).lstat().st_mode
                except OSError:
                    continue
                if mode & 0o6000:
                    seen[name] = mode
            gids |= _host_gids(MARK)
            time.sleep(0.05)
        step.join()
    finally:
        sb.close()
    assert not seen, f"setuid/setgid files on the host during the step: { {k: oct(v) for k, v in seen.items()} }"
    assert gids, "the step's processes were not found"
    assert 0 not in gids, "the sandbox runs with host gid 0"


def _git_status(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), "status", "--short"], capture_output=True, text=True)


def test_root_owned_repo_stays_roots_and_git_works_during_the_chat(tmp_path):
    repo = _user_repo(tmp_path, 0, 0)
    sb = _open(repo)
    try:
        res = sb.execute("echo x >> app.py && touch new.txt && mkdir -p d && touch d/f; echo rc=$?")
        assert "rc=0" in res.output, res.output  # the agent can still edit the user's files
        owners = {str(p.relative_to(repo)): p.lstat().st_uid for p in [repo, *repo.rglob("*")]}
        assert set(owners.values()) == {0}, f"not root's during the chat: { {k: v for k, v in owners.items() if v} }"
        status = _git_status(repo)
        assert status.returncode == 0, status.stderr
        assert "new.txt" in status.stdout
    finally:
        sb.close()


KILLED_CHAT = """
import sys, time
from pathlib import Path
from pipeline.chat import open_repo_sandbox
sb = open_repo_sandbox(Path(sys.argv[1]), "killed")
sb.execute("touch /testbed/made-in-step")
print("opened", flush=True)
sb.execute("sleep 60")
"""


def test_kill_9_of_a_chat_leaves_the_repo_as_it_was(tmp_path):
    repo = _user_repo(tmp_path, 0, 0)
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHAT, str(repo)], cwd=root, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "opened"
        time.sleep(0.5)
    finally:
        proc.kill()
        proc.wait()
    owners = {str(p.relative_to(repo)): p.lstat().st_uid for p in [repo, *repo.rglob("*")]}
    assert set(owners.values()) == {0}, f"left owned by others: { {k: v for k, v in owners.items() if v} }"
    assert (repo / "made-in-step").exists()
    status = _git_status(repo)
    assert status.returncode == 0 and "made-in-step" in status.stdout, status.stderr


GIT_PLANT = (
    f"git config core.fsmonitor 'touch /tmp/fsmonitor-{MARK}' ; "
    f"printf '[include]\\n\\tpath = /testbed/evil.cfg\\n' >> .git/config ; "
    "mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch /tmp/hook-ran\\n' > .git/hooks/pre-commit && "
    "chmod +x .git/hooks/pre-commit ; echo planted-rc=$?"
)


@pytest.mark.parametrize("owner", [(4242, 4242), (0, 0)], ids=["user-owned", "root-owned"])
def test_git_dir_is_read_only_to_the_agent(tmp_path, owner):
    repo = _user_repo(tmp_path, *owner)
    config_before = (repo / ".git" / "config").read_bytes()
    sb = _open(repo)
    try:
        res = sb.execute(GIT_PLANT)
        status = sb.execute("git status --short && git log --oneline | head -1 && git diff --stat; echo git-rc=$?")
    finally:
        sb.close()
    assert "git-rc=0" in status.output and "base" in status.output, status.output  # read-only git works inside
    assert (repo / ".git" / "config").read_bytes() == config_before, res.output
    assert not (repo / ".git" / "hooks" / "pre-commit").exists(), res.output
    assert "planted-rc=0" not in res.output


def test_the_host_side_writer_refuses_the_repos_git(tmp_path):
    from swe_env.sandbox.base import SandboxError

    repo = _user_repo(tmp_path, 0, 0)
    before = (repo / ".git" / "config").read_bytes()
    sb = _open(repo)
    try:
        with pytest.raises(SandboxError, match="read-only"):
            sb.write_file("/testbed/.git/config", "[core]\n\tfsmonitor = touch /tmp/x\n")
        sb.write_file("/testbed/notes.txt", "fine\n")
    finally:
        sb.close()
    assert (repo / ".git" / "config").read_bytes() == before and (repo / "notes.txt").read_text() == "fine\n"


@pytest.mark.parametrize("where", ["/testbed", "/tmp"])
def test_disk_budget_counts_deleted_files_held_open(tmp_path, where):
    """Issue 62 item 4 in a chat: /tmp is the sandbox's size-limited filesystem, and so is what a step writes in the
    repo (an overlay's upper layer, copied into the repo after the step): a hard limit in both."""
    from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox
    from swe_env.sandbox.limits import StepLimits
    from tasks.schema import Task
    from tests.swe_env.sandbox.test_hostile import HELD_OPEN, _most_held

    repo = _user_repo(tmp_path, 0, 0)
    limits = StepLimits(pids=64, memory_mb=256, cpu_s=60, file_mb=16, output_bytes=1 << 20, disk_mb=40, inodes=3000)
    task = Task(instance_id="chat:hostile", repo="local/proj", base_commit="HEAD", problem_statement="chat")
    sb = BwrapSandbox(task, BwrapConfig(python_env=False, install_tools=False, limits=limits), repo=repo)
    try:
        res = sb.execute(f"WHERE={where} {HELD_OPEN}", timeout=60)
    finally:
        sb.close()
    assert res.disk_exceeded, f"held {_most_held(res.output)} MiB against a 40 MiB budget: {res.output[-300:]}"
    assert _most_held(res.output) <= 48, res.output[-300:]
    assert sorted(p.name for p in repo.iterdir()) == [".git", "app.py"]


def test_a_repo_an_older_chat_left_to_the_sandbox_account_is_repaired_and_said(tmp_path):
    """What a kill -9 of a chat left before the idmapped mount: the whole repo the sandbox account's. Root's git
    refuses it; the next chat gives it back and says so in one line."""
    from swe_env.sandbox.host_user import dedicated_user

    repo = _user_repo(tmp_path, 0, 0)
    account = dedicated_user()
    for p in [repo, *repo.rglob("*")]:
        os.lchown(p, account.uid, account.gid)
    assert "dubious ownership" in _git_status(repo).stderr
    sb = _open(repo)
    try:
        notes = list(sb.notes)
    finally:
        sb.close()
    assert len(notes) == 1 and notes[0].startswith("repaired:"), notes
    assert {p.lstat().st_uid for p in [repo, *repo.rglob("*")]} == {0}
    assert _git_status(repo).returncode == 0


def test_a_git_repository_made_or_held_below_the_top_is_no_way_in(tmp_path):
    """A nested repository: one the agent makes is removed after its step (and the step says so); one the repo
    held when the chat opened is read-only like the top .git."""
    repo = _user_repo(tmp_path, 0, 0)
    subprocess.run(["git", "init", "-q", str(repo / "vendor")], check=True)
    vendor_config = (repo / "vendor" / ".git" / "config").read_bytes()
    sb = _open(repo)
    try:
        made = sb.execute("git init -q sub 2>&1; mkdir -p deep && printf 'gitdir: /testbed/x\\n' > deep/.git; echo ok")
        held = sb.execute("printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' >> vendor/.git/config; echo rc=$?")
    finally:
        sb.close()
    assert not (repo / "sub" / ".git").exists() and not (repo / "deep" / ".git").exists()
    assert "removed sub/.git" in made.output and "removed deep/.git" in made.output, made.output
    assert (repo / "vendor" / ".git" / "config").read_bytes() == vendor_config and "rc=0" not in held.output


@pytest.mark.parametrize("owner", [(4242, 4242), (0, 0)], ids=["user-owned", "root-owned"])
def test_a_steps_changes_reach_the_repo_as_its_owners(tmp_path, owner):
    """The overlay's changes land in the repo after each step: edits, deletions, a folder renamed, new folders, a
    symlink (as a link), a mode; your own edit between steps is what the next step sees."""
    repo = _user_repo(tmp_path, *owner)
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "pkg" / "sub" / "deep.txt").write_text("d\n")
    (repo / "gone").mkdir()
    (repo / "gone" / "f").write_text("f\n")
    (repo / "keep.sh").write_text("echo kept\n")
    for p in [repo / "pkg", *(repo / "pkg").rglob("*"), repo / "gone", repo / "gone" / "f", repo / "keep.sh"]:
        os.lchown(p, *owner)
    sb = _open(repo)
    try:
        res = sb.execute(
            "echo more >> app.py && rm -r gone && mv pkg/sub pkg/moved && mkdir -p new/dir && echo n > new/dir/f && "
            "ln -s /etc/passwd link && chmod 700 app.py && chmod 755 keep.sh && echo rc=$?"
        )
        (repo / "app.py").write_text("your edit\n")
        seen = sb.execute("cat app.py")
    finally:
        sb.close()
    assert "rc=0" in res.output, res.output
    assert seen.output == "your edit\n"
    assert not (repo / "gone").exists() and not (repo / "pkg" / "sub").exists()
    assert (repo / "pkg" / "moved" / "deep.txt").read_text() == "d\n"
    assert (repo / "new" / "dir" / "f").read_text() == "n\n"
    assert os.readlink(repo / "link") == "/etc/passwd" and (repo / "app.py").stat().st_mode & 0o777 == 0o700
    assert (repo / "keep.sh").read_text() == "echo kept\n" and (repo / "keep.sh").stat().st_mode & 0o777 == 0o755
    for p in [repo, *repo.rglob("*")]:
        assert (p.lstat().st_uid, p.lstat().st_gid) == owner, p


def test_a_repo_on_a_filesystem_without_idmapped_mounts_fails_the_open_with_a_way_out(tmp_path):
    """overlayfs (a container's root) cannot be mounted idmapped: the chat says so when it opens, never later."""
    from swe_env.sandbox.base import SandboxError

    layers = {name: tmp_path / name for name in ("lower", "upper", "work", "merged")}
    for folder in layers.values():
        folder.mkdir()
    opts = f"lowerdir={layers['lower']},upperdir={layers['upper']},workdir={layers['work']}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(layers["merged"])], check=True)
    try:
        repo = layers["merged"] / "proj"
        repo.mkdir()
        (repo / "app.py").write_text("print('hi')\n")
        tmp_path.chmod(0o755)
        with pytest.raises(SandboxError, match="without idmapped mounts.*as the repo's owner"):
            _open(repo).close()
    finally:
        subprocess.run(["umount", "-l", str(layers["merged"])], check=True)
