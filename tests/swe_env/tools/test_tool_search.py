"""search, run as the sandbox runs it: an executable without .py, called through command_for + bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swe_env.tools import command_for, install_tools


@pytest.fixture
def tools(tmp_path: Path) -> str:
    install_tools(tmp_path / "tools")
    return str(tmp_path / "tools")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text("def parse(x):\n    return parse_inner(x)\n\n\ndef other():\n    pass\n")
    (root / "pkg" / "util.py").write_text("# parse( helpers\n")
    (root / "README.md").write_text("Call parse(x) to parse.\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "h.py").write_text("parse(\n")
    (root / "blob.bin").write_bytes(b"parse(\x00\x01")
    return root


def search(tools: str, cwd: Path, **params: str) -> tuple[str, int]:
    proc = subprocess.run(
        ["bash", "-c", command_for("search", params, tools)], cwd=cwd, capture_output=True, text=True, timeout=30
    )
    return proc.stdout + proc.stderr, proc.returncode


def test_directory_search_counts_per_file(tools: str, repo: Path) -> None:
    out, rc = search(tools, repo, search_term="parse(", path=str(repo))
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == f'Found 3 matches for "parse(" in {repo}:'
    assert sorted(lines[1:-1]) == ["./README.md (1 matches)", "./pkg/core.py (1 matches)", "./pkg/util.py (1 matches)"]
    assert lines[-1] == f'End of matches for "parse(" in {repo}'


def test_default_path_is_the_current_directory(tools: str, repo: Path) -> None:
    out, rc = search(tools, repo / "pkg", search_term="other")
    assert rc == 0
    assert "./core.py (1 matches)" in out


def test_term_is_plain_text_not_a_regex(tools: str, repo: Path) -> None:
    out, _ = search(tools, repo, search_term="pars.", path=str(repo))
    assert out.startswith('No matches found for "pars."')


def test_file_search_prints_numbered_lines(tools: str, repo: Path) -> None:
    out, rc = search(tools, repo, search_term="parse", path=str(repo / "pkg" / "core.py"))
    assert rc == 0
    assert out.splitlines()[1:] == ["1:def parse(x):", "2:    return parse_inner(x)"]


def test_more_than_100_files_gives_a_note(tools: str, tmp_path: Path) -> None:
    many = tmp_path / "many"
    many.mkdir()
    for i in range(101):
        (many / f"f{i}.txt").write_text("needle\n")
    out, rc = search(tools, tmp_path, search_term="needle", path=str(many))
    assert rc == 0
    assert "More than 100 files matched" in out
    assert "narrow your search" in out
    assert "f1.txt" not in out
    (many / "f0.txt").unlink()
    out, _ = search(tools, tmp_path, search_term="needle", path=str(many))
    assert out.startswith('Found 100 matches for "needle"')


def test_long_file_match_lists_are_capped(tools: str, tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("hit\n" * 250)
    out, rc = search(tools, tmp_path, search_term="hit", path=str(path))
    assert rc == 0
    assert "200:hit" in out
    assert "201:hit" not in out
    assert "50 more matching lines" in out


@pytest.mark.parametrize(
    ("params", "message"),
    [({"search_term": "x", "path": "/no/such/dir"}, "does not exist"), ({"path": "/tmp"}, "`search_term` is required")],
)
def test_errors(tools: str, tmp_path: Path, params: dict, message: str) -> None:
    out, rc = search(tools, tmp_path, **params)
    assert rc == 1
    assert out.startswith("ERROR: ")
    assert message in out
    assert "Traceback" not in out
