"""`nexus-agent grade` prints any test id as text: parametrised ids like `test_x[a-b]` are not rich markup."""

from __future__ import annotations

from rich.console import Console

from cli.grade_cmd import _print
from swe_env.grading import GradeReport


def test_bracketed_test_ids_print_verbatim():
    ids = ["tests/t.py::test_x[/red]", "tests/t.py::test_y[a-b]", "tests/t.py::test_z[[bold]]"]
    report = GradeReport("acme__w-1", "error", False, dict.fromkeys(ids, "FAILED"), {}, error="bad [/x] thing")
    console = Console(record=True, width=200)
    _print(console, report)  # rich raised MarkupError on "[/red]" before
    text = console.export_text()
    assert all(i in text for i in ids) and "bad [/x] thing" in text
