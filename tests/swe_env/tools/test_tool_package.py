"""The tools package: its sources are stdlib-only python3 programs, and command_for quotes every argument."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swe_env.tools import TOOL_NAMES, command_for, install_tools, tool_sources


def test_sources_exist_for_every_tool() -> None:
    sources = tool_sources()
    assert tuple(sources) == TOOL_NAMES
    for path in sources.values():
        assert path.is_file()
        assert path.read_text().startswith("#!/usr/bin/env python3\n")


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_tools_are_stdlib_only_and_python_3_8_syntax(name: str) -> None:
    tree = ast.parse(tool_sources()[name].read_text(), feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a tool must not import its siblings: it is installed alone"
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_install_tools_makes_executables_without_suffix(tmp_path: Path) -> None:
    installed = install_tools(tmp_path / "bin")
    for name in TOOL_NAMES:
        assert installed[name] == tmp_path / "bin" / name
        assert os.access(installed[name], os.X_OK)


def test_command_for_quotes_every_value(tmp_path: Path) -> None:
    install_tools(tmp_path / "my tools")
    value = "line one\n'quoted' \"double\" $VAR `tick` \\ -dash"
    cmd = command_for("execute_bash", {"cmd": f"cat <<'EOF'\n{value}\nEOF"}, str(tmp_path / "my tools"))
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert value in proc.stdout


def test_command_for_rejects_unknown_tools() -> None:
    with pytest.raises(ValueError, match="Unknown tool 'rm'"):
        command_for("rm", {}, "/usr/local/bin")


def test_command_for_shape() -> None:
    assert command_for("search", {"search_term": "a b", "path": "/testbed"}, "/usr/local/bin/") == (
        "/usr/local/bin/search '--search_term=a b' --path=/testbed"
    )


PY38 = Path("/root/.pyenv/versions/3.8.18/bin/python3")
SMOKE = {
    "execute_bash": ({"cmd": "echo $((6 * 7)); git status"}, 1, "not allowed"),
    "search": ({"search_term": "needle", "path": "."}, 0, "./hay.txt (1 matches)"),
    "finish": ({"command": "submit", "result": "ok"}, 0, "ok"),
    "file_editor": ({"command": "view", "path": "/"}, 0, "2 levels deep"),
}


@pytest.mark.skipif(not PY38.exists(), reason="no python 3.8 interpreter on this machine")
@pytest.mark.parametrize("name", TOOL_NAMES)
def test_each_tool_runs_under_python_3_8(tmp_path: Path, name: str) -> None:
    (tmp_path / "py38").mkdir()
    (tmp_path / "py38" / "python3").symlink_to(PY38)
    (tmp_path / "hay.txt").write_text("a needle\n")
    install_tools(tmp_path / "tools")
    params, code, expected = SMOKE[name]
    env = dict(os.environ, PATH=f"{tmp_path / 'py38'}:{os.environ['PATH']}")
    cmd = command_for(name, params, str(tmp_path / "tools"))
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=30)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert expected in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not PY38.exists(), reason="no python 3.8 interpreter on this machine")
def test_command_for_can_pin_the_interpreter(tmp_path: Path) -> None:
    install_tools(tmp_path / "tools")
    cmd = command_for("execute_bash", {"cmd": "echo pinned"}, str(tmp_path / "tools"), python=str(PY38))
    assert cmd.startswith(f"{PY38} ")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0
    assert "pinned" in proc.stdout
