"""`chat --protect`: a new session keeps its opening whole and saves the setting; a resume with another value is
refused in one line, as for the other session settings."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from clilib import Pty, cli_env, nexus

from kvstore.session.persist import read_session_file
from pipeline import chat as cs

pytestmark = pytest.mark.usefixtures("bwrap_installed")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.slow  # a pty end to end (~10-20 s)
def test_chat_protects_the_opening_and_resume_keeps_the_setting(tmp_path: Path, tiny_model_dir: Path) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    base = ["chat", "--session", "s", "--model", str(tiny_model_dir), "--max-steps", "1", "--max-new-tokens", "6"]
    env = cli_env(tmp_path / "home")
    chat = Pty([*base, "--yolo", "--repo", str(repo), "--budget", "2048", "--protect", "system"], env, tmp_path)
    chat.expect("you> ")
    chat.send("list the files")
    assert "turn 1: prefill" in ANSI.sub("", chat.expect("you> "))
    chat.send("/quit")
    chat.expect("--resume")
    assert chat.close() == 0
    folder = tmp_path / "home" / "sessions" / "s"
    assert json.loads((folder / cs.STATE_FILE).read_text())["config"]["protect"] == "system"
    doc, _ = read_session_file(folder / cs.SESSION_FILE)
    ((start, end),) = doc["cache"]["protected"]  # one span: the system prompt, from the first token
    assert doc["messages"][0]["role"] == "system" and start == 0 and 0 < end < doc["prefilled"]
    res = nexus(*base, "--resume", "--protect", "none", env=env, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "--protect none (saved: system): session" in res.stderr
