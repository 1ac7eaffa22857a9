"""--call-format as a user gives it: a bad value, native tool calls a local model's template cannot show, and the XML
call grammar asked for beside native tool calls are each one line, exit 2, before any folder or sandbox."""

from __future__ import annotations

import json
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


@pytest.mark.slow
@pytest.mark.usefixtures("bwrap_installed")
def test_a_local_qwen_runs_in_the_tools_format(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A local model whose template renders tools passes the check and runs: the tools in its opening, the format in
    the report and the trajectory (its random replies call nothing, so each step is a reminder)."""
    out = tmp_path / "run"
    args = ["--model", str(tiny_model_dir), "--call-format", "tools", "--max-steps", "2", "--max-new-tokens", "8"]
    res = nexus("solve", *args, "--sandbox", "bwrap", "--out", str(out), env=cli_env(tmp_path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((out / "report.json").read_text())
    assert (report["config"]["call_format"], report["steps"], report["exit_reason"]) == ("tools", 2, "abs_step_limit")
    records = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert records[0]["meta"]["call_format"] == "tools"
    system = records[1]["input"][0]
    assert [t["function"]["name"] for t in system["tools"]] == ["file_editor", "execute_bash", "search", "finish"]
    assert "did not call a tool" in records[1]["observation"]
