"""The command line's own surface: `--version`, and help that shows no value type after an on/off flag."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from cli.app import app


def test_version_prints_the_installed_version() -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"nexus-agent {version('nexus-agent')}"


@pytest.mark.parametrize("command", [[], ["solve"], ["eval"], ["chat"], ["grade"]])
def test_help_shows_no_bool_metavar(command: list[str]) -> None:
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output and "--help" in res.output
    assert "<str>" in res.output or not command  # value options keep their type


def _help(command: str) -> str:
    """A command's help as one line of words (the option table's borders and line breaks dropped)."""
    text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "300"}).output
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_help_says_the_defaults_a_user_must_know() -> None:
    solve = _help("solve")
    assert "--learn-profile" in solve and "Off by default" in solve and "'builtin' (the default" in solve
    grade = _help("grade")
    assert "0 resolved; 1 not resolved" in grade and "2 the grading could not run" in grade
    evaluate = _help("eval")
    assert "1 when some task's run failed" in evaluate and "130 when interrupted" in evaluate
