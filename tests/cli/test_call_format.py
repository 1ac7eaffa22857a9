"""--call-format as a user gives it: a bad value, native tool calls a local model's template cannot show, and the XML
call grammar asked for beside native tool calls are each one line, exit 2, before any folder or sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from clilib import cli_env, nexus


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--call-format", "json"], "--call-format json: use one of auto, xml, tools"),
        (["--call-format", "tools"], "--call-format tools: the chat template of smollm2-135m does not render tools"),
        (["--call-format", "tools", "--constrain"], "--constrain makes replies follow the XML call grammar"),
    ],
)
def test_call_format_errors_are_one_line(tmp_path: Path, options: list[str], says: str) -> None:
    res = nexus("solve", *options, "--out", str(tmp_path / "run"), env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and says in res.stderr, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
