"""Hostile repositories and patches for real: a model patch that writes into `.git` is refused by grading (GNU
patch, the last fallback, would write it where git apply refuses), and a repo holding a relative symlink that
climbs out of it gets into a docker sandbox (docker refuses such a link when unpacking into /testbed itself)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.config import RunConfig
from pipeline.own_repo import OwnRepo, own_task
from swe_env.patching import apply_patch
from swe_env.sandbox.bwrap import BwrapSandbox
from swe_env.sandbox.docker import DockerConfig, DockerSandbox
from tasks import get_task

TASK_ID = "nexus-demo__semver-lite-1"
PLANT = """diff --git a/.git/config b/.git/config
--- a/.git/config
+++ b/.git/config
@@ -1,2 +1,3 @@
 [core]
+\tfsmonitor = "touch /tmp/planted; false"
 \trepositoryformatversion = 0
diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout
new file mode 100755
--- /dev/null
+++ b/.git/hooks/post-checkout
@@ -0,0 +1,2 @@
+#!/bin/sh
+touch /tmp/planted
"""
LEGIT = """diff --git a/.github/ci.yml b/.github/ci.yml
new file mode 100644
--- /dev/null
+++ b/.github/ci.yml
@@ -0,0 +1 @@
+on: push
diff --git a/.gitignore b/.gitignore
new file mode 100644
--- /dev/null
+++ b/.gitignore
@@ -0,0 +1 @@
+*.pyc
"""


def test_a_patch_into_dot_git_is_refused_and_git_stays(bwrap_installed) -> None:
    with BwrapSandbox(get_task(TASK_ID)) as box:
        config = box.execute("cat .git/config").output
        applied = apply_patch(box, PLANT, "model")
        assert applied.method is None and "inside a .git folder: diff --git a/.git/config" in applied.log
        assert box.execute("cat .git/config").output == config
        assert box.execute("test -e .git/hooks/post-checkout").returncode != 0
        legit = apply_patch(box, LEGIT, "model")  # .github and .gitignore are no .git folder
        assert legit.method == "git apply" and box.execute("cat .github/ci.yml").output == "on: push\n"


# A hunk's removed line that reads like a file header (an SQL comment naming .git/hooks): the hunk's counts say it is
# body, as git apply reads it, so the patch is applied, not refused.
SQL_ADD = """diff --git a/notes.sql b/notes.sql
new file mode 100644
--- /dev/null
+++ b/notes.sql
@@ -0,0 +1,2 @@
+-- see .git/hooks for the checks
+select 1;
"""
SQL_REMOVE = """diff --git a/notes.sql b/notes.sql
--- a/notes.sql
+++ b/notes.sql
@@ -1,2 +1 @@
--- see .git/hooks for the checks
 select 1;
"""
# A hunk of README.md (which holds no line "x") that claims `old` and `new` lines, then a hunk planting in .git/config.
README_HUNK = "--- a/README.md\n+++ b/README.md\n@@ -1,{old} +1,{new} @@\n-x\n+y\n"
CONFIG_HUNK = """--- a/.git/config
+++ b/.git/config
@@ -1,2 +1,3 @@
 [core]
+\tfsmonitor = "touch /tmp/planted; false"
 \trepositoryformatversion = 0
"""
# Hunks that lie about their size, so that a header hides in what they count or follows what they claim: refused.
MISCOUNTED = README_HUNK.format(old=3, new=3) + "diff --git a/.git/config b/.git/config\n" + CONFIG_HUNK
OVERRUN = README_HUNK.format(old=3, new=1) + CONFIG_HUNK
# Counted exactly: the header-like lines are body for every tool, which then finds README.md's text unlike them.
COUNTED = README_HUNK.format(old=2, new=2) + CONFIG_HUNK


def test_header_lines_are_read_by_the_hunk_counts(bwrap_installed) -> None:
    with BwrapSandbox(get_task(TASK_ID)) as box:
        config = box.execute("cat .git/config").output
        assert apply_patch(box, SQL_ADD, "add").method == "git apply"
        removed = apply_patch(box, SQL_REMOVE, "remove")
        assert removed.method == "git apply", removed.log
        assert box.execute("cat notes.sql").output == "select 1;\n"
        for patch in (MISCOUNTED, OVERRUN):
            applied = apply_patch(box, patch, "model")
            assert applied.method is None
            assert applied.log.startswith("refused: the patch writes inside a .git folder: ")  # before any tool ran
        counted = apply_patch(box, COUNTED, "model")
        assert counted.method is None
        assert "$ patch --batch" in counted.log  # every tool ran, and none wrote .git
        assert box.execute("cat .git/config").output == config
        assert box.execute("test -e /tmp/planted").returncode != 0


@pytest.mark.docker
def test_a_symlink_climbing_out_of_the_repo_gets_into_docker(tmp_path: Path, docker_client, builtin_image) -> None:
    repo = tmp_path / "linked"
    repo.mkdir()
    (repo / "calc.py").write_text("x = 1\n")
    (repo / "up").symlink_to("../../../../etc/hostname")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    with own_task(OwnRepo(repo, "fix it"), RunConfig()) as (task, cfg, _):
        config = DockerConfig(repo_cache=cfg.repo_cache, install_tools=True)
        with DockerSandbox(task, config, client=docker_client) as box:
            assert box.execute("readlink up").output == "../../../../etc/hostname\n"
            assert box.execute("cat calc.py && git status --porcelain").output == "x = 1\n"
            assert box.execute("stat -c %U:%a /testbed").output == "root:755\n"
