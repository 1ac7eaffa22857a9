"""How to run and read a task's tests: the test command and the swebench log parser for its repo.

Built-in tasks carry `test_cmd` and use the pytest parser. Real SWE-bench repos take the runner from their
recipe (swe_env.envs.recipes: swebench's per-(repo, version) specs), run on the test files the test patch touches.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from swebench.harness import log_parsers
from swebench.harness.log_parsers import python as py_parsers

from swe_env.envs.recipes import recipe_for
from tasks.schema import Task

Parser = Callable[[str, object], dict[str, str]]

_NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")


def test_command(task: Task) -> str:
    """The shell command (run in the repo) whose output the parser reads: the recipe's eval commands, then its
    test runner on the test files the test patch touches."""
    if task.test_cmd:
        return task.test_cmd
    recipe = recipe_for(task)
    return "\n".join([*recipe.eval_commands, " ".join([recipe.test_cmd, *test_directives(task)])])


def test_directives(task: Task) -> list[str]:
    """The test files the test patch touches, in the form the repo's runner takes them."""
    files = re.findall(r"^diff --git a/.* b/(.*)$", task.test_patch, flags=re.M)
    files = [f for f in files if not f.endswith(_NON_TEST_EXTS)]
    if task.repo == "django/django":
        files = [f.removeprefix("tests/").removesuffix(".py").replace("/", ".") for f in files]
    return files


def log_parser(task: Task) -> Parser:
    """swebench's log parser for the task's repo; pytest's for built-in and unknown repos."""

    table = getattr(py_parsers, "MAP_REPO_TO_PARSER_PY", None)
    if table is None:  # older swebench keeps one table for every language
        table = getattr(log_parsers, "MAP_REPO_TO_PARSER", {})
    return table.get(task.repo, py_parsers.parse_log_pytest)
