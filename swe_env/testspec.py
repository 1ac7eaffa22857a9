"""How to run and read a task's tests: the test command and the swebench log parser for its repo.

Built-in tasks carry `test_cmd` and use the pytest parser. Real SWE-bench repos take the command from swebench's
per-repo specs when the installed swebench has them (`MAP_REPO_VERSION_TO_SPECS`, swebench < 5), else from the
conventions below, run on the test files the test patch touches.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tasks.schema import Task

Parser = Callable[[str, object], dict[str, str]]

# The repos SWE-bench runs with their own runner; every other Python repo runs pytest -rA.
_RUNNERS = {
    "django/django": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
    "sympy/sympy": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
}
_DEFAULT_RUNNER = "pytest --no-header -rA --tb=no -p no:cacheprovider"
_NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")


def test_command(task: Task) -> str:
    """The shell command (run in the repo) whose output the parser reads."""
    if task.test_cmd:
        return task.test_cmd
    spec = swebench_spec(task)
    runner = spec["test_cmd"] if spec and "test_cmd" in spec else _RUNNERS.get(task.repo, _DEFAULT_RUNNER)
    if isinstance(runner, list):
        runner = " && ".join(runner)
    return " ".join([runner, *test_directives(task)])


def test_directives(task: Task) -> list[str]:
    """The test files the test patch touches, in the form the repo's runner takes them."""
    files = re.findall(r"^diff --git a/.* b/(.*)$", task.test_patch, flags=re.M)
    files = [f for f in files if not f.endswith(_NON_TEST_EXTS)]
    if task.repo == "django/django":
        files = [f.removeprefix("tests/").removesuffix(".py").replace("/", ".") for f in files]
    return files


def swebench_spec(task: Task) -> dict | None:
    """swebench's install/test spec for (repo, version), when the installed swebench ships those tables."""
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # swebench < 5
    except ImportError:
        return None
    return MAP_REPO_VERSION_TO_SPECS.get(task.repo, {}).get(task.version)


def log_parser(task: Task) -> Parser:
    """swebench's log parser for the task's repo; pytest's for built-in and unknown repos."""
    from swebench.harness.log_parsers import python as py_parsers

    table = getattr(py_parsers, "MAP_REPO_TO_PARSER_PY", None)
    if table is None:  # older swebench keeps one table for every language
        from swebench.harness import log_parsers

        table = getattr(log_parsers, "MAP_REPO_TO_PARSER", {})
    return table.get(task.repo, py_parsers.parse_log_pytest)
