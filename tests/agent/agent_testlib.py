"""Test helpers: a real local environment (a git repo and the real tool programs, run by bash) and reply builders."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from agent.backends.replay import ReplayModel
from agent.calls import CALL_FORMATS
from swe_env.sandbox.base import ExecResult
from swe_env.tools import install_tools

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = (
    "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_mul():\n    assert mul(2, 3) == 6\n"
)


class DirSandbox:
    """The Sandbox protocol over a host directory (no isolation; test use only)."""

    def __init__(self, repo: Path, tools_dir: Path, state_dir: Path, base_commit: str) -> None:
        self.workdir, self.tools_dir = str(repo), str(tools_dir)
        self._env = {**os.environ, "NEXUS_TOOL_STATE": str(state_dir), "PATH": f"{tools_dir}:{os.environ['PATH']}"}
        self.base_commit = base_commit

    def execute(self, cmd: str, timeout: float = 120.0) -> ExecResult:
        proc = subprocess.Popen(
            ["bash", "-c", cmd],
            cwd=self.workdir,
            env=self._env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
            return ExecResult(out, proc.returncode)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
            return ExecResult(out, -1, timed_out=True)

    def read_file(self, path: str) -> str:
        return Path(path).read_text()

    def write_file(self, path: str, content: str) -> None:
        Path(path).write_text(content)

    def get_patch(self) -> str:
        return self.execute(f"git add -A && git diff --cached {self.base_commit}").output

    def close(self) -> None:
        pass

    def __enter__(self) -> DirSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


class Reply(str):
    """A scripted reply in the XML format that also knows its call, so a script can be replayed in any format."""

    name: str
    params: dict[str, str]


def call(name: str, **params: str) -> Reply:
    """A well-formed reply: a thought and one call."""
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    reply = Reply(f"Next step: {name}.\n<function={name}>\n{body}</function>")
    reply.name, reply.params = name, params
    return reply


# the ways a model calls tools: DeepSWE's XML text, a server's native tool_calls, Hermes <tool_call> text (a local
# chat template's convention, or a server without a tool parser)
STYLES = (*CALL_FORMATS, "tools-text")


def scripted(style: str, replies: list[str]) -> ReplayModel:
    """A deterministic model answering with `replies`, each call written the way `style` writes it (plain text
    replies stay as they are)."""
    texts: list[str] = []
    natives: list[list[dict[str, str]]] = []
    for n, r in enumerate(replies):
        native: list[dict[str, str]] = []
        if isinstance(r, Reply) and style == "tools":
            native = [{"id": f"call_{n}", "name": r.name, "arguments": json.dumps(r.params)}]
            r = f"Next step: {r.name}."
        elif isinstance(r, Reply) and style == "tools-text":
            body = json.dumps({"name": r.name, "arguments": r.params})
            r = f"Next step: {r.name}.\n<tool_call>\n{body}\n</tool_call>"
        texts.append(r)
        natives.append(native)
    return ReplayModel(texts, tool_calls=natives)


def format_of(style: str) -> str:
    """The call format (agent.calls) a style of replies belongs to."""
    return "xml" if style == "xml" else "tools"


def make_sandbox(tmp_path: Path) -> DirSandbox:
    """A repo with a bug in calc.add and a test file, committed; the four tools installed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text(BUGGY)
    (repo / "test_calc.py").write_text(TESTS)
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    install_tools(tmp_path / "tools")
    return DirSandbox(repo, tmp_path / "tools", tmp_path / "state", git(repo, "rev-parse", "HEAD"))
