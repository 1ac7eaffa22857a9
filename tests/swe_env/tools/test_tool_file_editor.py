"""file_editor, run as the sandbox runs it: an executable without .py, called through command_for + bash."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from swe_env.tools import command_for, install_tools

PY38 = Path("/root/.pyenv/versions/3.8.18/bin/python3")
SOURCE = "def f():\n    a = 1\n    b = 2\n    c = 3\n    return a\n\n\nx = f()\ny = f()\n"


@pytest.fixture
def tools(tmp_path: Path) -> str:
    install_tools(tmp_path / "tools")
    return str(tmp_path / "tools")


def edit(tools: str, tmp_path: Path, path_bin: str | None = None, **params: str) -> tuple[str, int]:
    env = dict(os.environ, NEXUS_TOOL_STATE=str(tmp_path / "state"))
    if path_bin:
        env["PATH"] = f"{path_bin}:{env['PATH']}"
    proc = subprocess.run(
        ["bash", "-c", command_for("file_editor", params, tools)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc.stdout + proc.stderr, proc.returncode


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "repo" / "mod.py"
    path.parent.mkdir()
    path.write_text(SOURCE)
    return path


def test_view_file_is_numbered(tools: str, tmp_path: Path, src: Path) -> None:
    out, rc = edit(tools, tmp_path, command="view", path=str(src))
    assert rc == 0
    assert f"Here's the result of running `cat -n` on {src}:" in out
    assert "     1 def f():" in out
    assert "     9 y = f()" in out
    assert "    10 " not in out  # the final newline does not add a line


def test_view_range(tools: str, tmp_path: Path, src: Path) -> None:
    out, rc = edit(tools, tmp_path, command="view", path=str(src), view_range="[2, 3]")
    assert rc == 0
    assert "     2     a = 1" in out
    assert "     3     b = 2" in out
    assert "def f" not in out
    assert "c = 3" not in out
    out, rc = edit(tools, tmp_path, command="view", path=str(src), view_range="8,-1")
    assert rc == 0
    assert "     8 x = f()" in out
    assert "     9 y = f()" in out
    assert "return" not in out


@pytest.mark.parametrize("bad", ["[0, 3]", "[3, 2]", "[3, 10]", "abc", "[1]"])
def test_bad_view_range(tools: str, tmp_path: Path, src: Path, bad: str) -> None:
    out, rc = edit(tools, tmp_path, command="view", path=str(src), view_range=bad)
    assert rc == 1
    assert out.startswith("ERROR: Invalid view_range")
    assert "Traceback" not in out


def test_concise_view_elides_long_bodies(tools: str, tmp_path: Path, src: Path) -> None:
    out, rc = edit(tools, tmp_path, command="view", path=str(src), concise="true")
    assert rc == 0
    assert "     1 def f():" in out
    assert "     2 ... eliding lines 2-5 ..." in out
    assert "b = 2" not in out
    assert "     8 x = f()" in out


def test_view_directory_two_levels_without_hidden(tools: str, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "pkg" / "sub" / "deep").mkdir(parents=True)
    (root / "pkg" / "sub" / "deep" / "too_deep.py").write_text("")
    (root / "pkg" / "a.py").write_text("")
    (root / ".git").mkdir()
    (root / ".hidden.txt").write_text("")
    (root / "README").write_text("")
    out, rc = edit(tools, tmp_path, command="view", path=str(root))
    assert rc == 0
    listed = out.splitlines()[1:]
    assert listed == [str(root), str(root / "README"), str(root / "pkg"), str(root / "pkg/a.py"), str(root / "pkg/sub")]


def test_long_output_is_capped_with_a_note(tools: str, tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    big.write_text("".join(f"value_{i} = {i}\n" for i in range(3000)))
    out, rc = edit(tools, tmp_path, command="view", path=str(big))
    assert rc == 0
    assert "<response clipped>" in out
    assert "view_range" in out
    assert len(out) < 11000
    out, _ = edit(tools, tmp_path, command="view", path=str(big), view_range="[2990, -1]")
    assert "  3000 value_2999 = 2999" in out
    assert "<response clipped>" not in out


def test_create_and_no_overwrite(tools: str, tmp_path: Path, src: Path) -> None:
    new = tmp_path / "repo" / "new" / "file.py"
    out, rc = edit(tools, tmp_path, command="create", path=str(new), file_text="print('hi')\n")
    assert rc == 0
    assert f"File created at {new}" in out
    assert new.read_text() == "print('hi')\n"
    out, rc = edit(tools, tmp_path, command="create", path=str(src), file_text="oops")
    assert rc == 1
    assert out.startswith("ERROR: File already exists")
    assert src.read_text() == SOURCE
    out, rc = edit(tools, tmp_path, command="create", path=str(tmp_path / "x.py"))
    assert rc == 1
    assert "file_text" in out


def test_str_replace_unique_match(tools: str, tmp_path: Path, src: Path) -> None:
    out, rc = edit(tools, tmp_path, command="str_replace", path=str(src), old_str="    b = 2\n", new_str="    b = 20\n")
    assert rc == 0, out
    assert src.read_text() == SOURCE.replace("b = 2\n", "b = 20\n")
    assert "has been edited" in out
    assert "     3\t    b = 20" in out  # snippet of the edited region, numbered


def test_str_replace_no_match_and_multiple_matches(tools: str, tmp_path: Path, src: Path) -> None:
    out, rc = edit(tools, tmp_path, command="str_replace", path=str(src), old_str="z = 9", new_str="q")
    assert rc == 1
    assert "did not appear verbatim" in out
    out, rc = edit(tools, tmp_path, command="str_replace", path=str(src), old_str="= f()", new_str="= g()")
    assert rc == 1
    assert "Multiple occurrences" in out
    assert "[8, 9]" in out
    assert src.read_text() == SOURCE


def test_str_replace_values_survive_quoting(tools: str, tmp_path: Path, src: Path) -> None:
    new = "    b = \"it's\" + '$HOME' + `x` + \\n\n    -c = --2\n"
    out, rc = edit(tools, tmp_path, command="str_replace", path=str(src), old_str="    b = 2\n", new_str=new)
    assert rc == 0, out
    assert src.read_text() == SOURCE.replace("    b = 2\n", new)


def test_str_replace_without_new_str_deletes(tools: str, tmp_path: Path, src: Path) -> None:
    _, rc = edit(tools, tmp_path, command="str_replace", path=str(src), old_str="    c = 3\n")
    assert rc == 0
    assert src.read_text() == SOURCE.replace("    c = 3\n", "")


def test_insert(tools: str, tmp_path: Path, src: Path) -> None:
    _, rc = edit(tools, tmp_path, command="insert", path=str(src), insert_line="0", new_str="import os")
    assert rc == 0
    assert src.read_text() == "import os\n" + SOURCE
    out, rc = edit(tools, tmp_path, command="insert", path=str(src), insert_line="10", new_str="z = 1\n")
    assert rc == 0
    assert "    11\tz = 1" in out
    assert src.read_text().endswith("y = f()\nz = 1\n")
    out, rc = edit(tools, tmp_path, command="insert", path=str(src), insert_line="99", new_str="q")
    assert rc == 1
    assert "Invalid insert_line 99" in out
    assert "[0, 11]" in out


def test_undo_edit_across_processes(tools: str, tmp_path: Path, src: Path) -> None:
    edit(tools, tmp_path, command="str_replace", path=str(src), old_str="a = 1", new_str="a = 100")
    edit(tools, tmp_path, command="insert", path=str(src), insert_line="0", new_str="# top")
    out, rc = edit(tools, tmp_path, command="undo_edit", path=str(src))
    assert rc == 0
    assert "undone successfully" in out
    assert src.read_text() == SOURCE.replace("a = 1", "a = 100")
    edit(tools, tmp_path, command="undo_edit", path=str(src))
    assert src.read_text() == SOURCE
    out, rc = edit(tools, tmp_path, command="undo_edit", path=str(src))
    assert rc == 1
    assert out.startswith("ERROR: No edit history")


def test_undo_create_removes_the_file(tools: str, tmp_path: Path) -> None:
    new = tmp_path / "made.txt"
    edit(tools, tmp_path, command="create", path=str(new), file_text="x\n")
    _, rc = edit(tools, tmp_path, command="undo_edit", path=str(new))
    assert rc == 0
    assert not new.exists()


def test_crlf_and_latin1_files_keep_their_form(tools: str, tmp_path: Path) -> None:
    path = tmp_path / "win.txt"
    path.write_bytes("caf\xe9\r\nsecond\r\n".encode("latin-1"))
    _, rc = edit(tools, tmp_path, command="str_replace", path=str(path), old_str="second", new_str="2nd")
    assert rc == 0
    assert path.read_bytes() == "caf\xe9\r\n2nd\r\n".encode("latin-1")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"command": "view", "path": "relative.py"}, "is not an absolute path"),
        ({"command": "view", "path": "/no/such/file.py"}, "does not exist"),
        ({"command": "view"}, "`path` is required"),
        ({"command": "explode", "path": "/tmp"}, "Unrecognized command"),
        ({"path": "/tmp"}, "`command` is required"),
        ({"command": "str_replace", "path": "/tmp", "old_str": "a"}, "is a directory"),
        ({"command": "view", "path": "/tmp", "bogus": "1"}, "unrecognized arguments"),
        ({"command": "view", "path": "/tmp", "a b": "1"}, "unrecognized arguments"),
    ],
)
def test_errors_are_one_clear_line(tools: str, tmp_path: Path, params: dict, message: str) -> None:
    out, rc = edit(tools, tmp_path, **params)
    assert rc == 1
    assert out.startswith("ERROR: ")
    assert message in out
    assert "Traceback" not in out
    assert "usage:" not in out


@pytest.mark.skipif(not PY38.exists(), reason="no python 3.8 interpreter on this machine")
def test_runs_under_python_3_8(tools: str, tmp_path: Path, src: Path) -> None:
    bin_dir = tmp_path / "py38"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(PY38)
    out, rc = edit(tools, tmp_path, str(bin_dir), command="str_replace", path=str(src), old_str="a = 1", new_str="a=2")
    assert rc == 0, out
    out, rc = edit(tools, tmp_path, str(bin_dir), command="view", path=str(src), concise="true")
    assert rc == 0
    assert "eliding lines 2-5" in out
    _, rc = edit(tools, tmp_path, str(bin_dir), command="undo_edit", path=str(src))
    assert rc == 0
    assert src.read_text() == SOURCE


def test_insert_counts_only_newlines_as_line_ends(tools: str, tmp_path: Path) -> None:
    path = tmp_path / "ff.py"
    path.write_text("a = 1\n\x0c\nb = 2")  # a form feed is not a line end; no final newline
    _, rc = edit(tools, tmp_path, command="insert", path=str(path), insert_line="3", new_str="c = 3")
    assert rc == 0
    assert path.read_text() == "a = 1\n\x0c\nb = 2\nc = 3\n"


def test_an_edit_whose_history_cannot_be_saved_still_happens(tools: str, tmp_path: Path, src: Path) -> None:
    (tmp_path / "state").write_text("a file, so no directory can be made here")
    out, rc = edit(tools, tmp_path, command="str_replace", path=str(src), old_str="a = 1", new_str="a = 5")
    assert rc == 0
    assert "has been edited" in out
    assert "undo_edit will not be able to revert" in out
    assert "a = 5" in src.read_text()
