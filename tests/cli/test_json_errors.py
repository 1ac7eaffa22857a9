"""With --json, an error also prints one JSON object on stdout (where the result would have been), beside the one
line on stderr and with the same exit code: `{"error": {"type": ..., "message": ..., "exit_code": ...}}`
(cli/errors.py). Ctrl-C under --json: tests/cli/test_ctrl_c.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cli.app import COMMANDS, load_command, main

# (command, its arguments, type, a part of the message); "{tmp}" is the test's folder. Every command with a --json
# flag has a case (test_every_json_flag_has_a_case).
CASES = [
    ("solve", "nexus-demo__pagekit-9 --json", "input", "no task 'nexus-demo__pagekit-9'"),
    ("solve", "--threads 0 --json", "usage", "Invalid value for '--threads'"),
    ("eval", "--executor k8s --out {tmp}/o --json", "input", "unknown --executor"),
    ("eval", "--json", "usage", "Missing option '--out'"),
    ("show", "{tmp}/none --json", "input", "no such run folder"),
    ("show", "--json", "usage", "Missing argument 'folder'"),
    ("tasks list", "-d {tmp}/none.jsonl --json", "input", "none.jsonl does not exist"),
    ("tasks show", "nope --json", "input", "no task 'nope'"),
    ("profiles", "{tmp}/none --json", "input", "no such folder"),
    ("env status", "--json --bogus", "usage", "No such option: --bogus"),
]
IDS = [f"{command} {args}" for command, args, _, _ in CASES]
INPUT = [case for case in CASES if case[2] == "input"]
USAGE = [case for case in CASES if case[2] == "usage"]


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """Run the real entry point in this process (as the console script does) on a command line (split at spaces;
    "{tmp}" is the test's folder): exit code, stdout, stderr."""

    def run(line: str) -> tuple[int, str, str]:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("NEXUS_AGENT_HOME", str(tmp_path / "home"))
        monkeypatch.setattr(sys, "argv", ["nexus-agent", *line.replace("{tmp}", str(tmp_path)).split()])
        with pytest.raises(SystemExit) as exit_:
            main()
        out, err = capsys.readouterr()
        return exit_.value.code, out, err

    return run


@pytest.mark.parametrize(("command", "args", "kind", "said"), CASES, ids=IDS)
def test_an_error_under_json_is_one_json_object_on_stdout(cli, command: str, args: str, kind: str, said: str) -> None:
    code, out, _ = cli(f"{command} {args}")
    error = json.loads(out)["error"]
    assert error == {"type": kind, "message": error["message"], "exit_code": 2}, out
    assert said in error["message"]
    assert code == 2


@pytest.mark.parametrize(("command", "args", "kind", "said"), INPUT, ids=[f"{c} {a}" for c, a, _, _ in INPUT])
def test_the_stderr_line_of_an_input_error_stays_and_says_the_same(cli, command: str, args: str, kind, said) -> None:
    _, out, err = cli(f"{command} {args}")
    assert err == f"error: {json.loads(out)['error']['message']}\n"


@pytest.mark.parametrize(("command", "args", "kind", "said"), USAGE, ids=[f"{c} {a}" for c, a, _, _ in USAGE])
def test_a_usage_error_under_json_is_still_said_on_stderr(cli, command: str, args: str, kind, said: str) -> None:
    _, _, err = cli(f"{command} {args}")
    assert said in err, err


def test_without_json_stdout_stays_empty(cli) -> None:
    assert cli("solve nexus-demo__pagekit-9")[:2] == (2, "")


def test_json_after_the_end_of_options_is_not_the_flag(cli) -> None:
    assert cli("solve --threads 0 -- --json")[:2] == (2, "")


def test_a_json_option_that_names_a_file_leaves_stdout_alone(cli) -> None:
    """grade's --json PATH writes its report to a file; its errors stay on stderr."""
    assert cli("grade nope --patch empty --json {tmp}/r.json")[:2] == (2, "")


def _leaves(path: str, command) -> list[tuple[str, object]]:
    subs = getattr(command, "commands", None)
    if not subs:
        return [(path, command)]
    return [leaf for name, sub in subs.items() for leaf in _leaves(f"{path} {name}", sub)]


def test_every_json_flag_has_a_case() -> None:
    """A command given a --json flag (cli.errors.json_flag) gets a case above."""
    flagged = {
        path
        for name, (target, _) in COMMANDS.items()
        for path, leaf in _leaves(name, load_command(name, target))
        if any(getattr(p, "is_flag", False) and "--json" in p.opts for p in leaf.params)
    }
    assert flagged == {command for command, _, _, _ in CASES}
