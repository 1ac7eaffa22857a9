"""Output for scripts: --json on the listings and the run summaries, whole lines and ids when stdout is not a
terminal, and no third-party progress bars (carriage-return noise) in a log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clilib import GOLD_DIR, cli_env, nexus

from tasks import load_tasks

PROBE = (
    "import sys\n"
    "sys.argv = ['nexus-agent', 'tasks', 'list', '--json']\n"
    "from cli.app import main\n"
    "try:\n    main()\n"
    "except SystemExit:\n    pass\n"
    "from tqdm import tqdm\n"
    "for _ in tqdm(range(3), desc='converting'):\n    pass\n"
    "import transformers.utils.logging as tl\n"
    "from huggingface_hub.utils import are_progress_bars_disabled\n"
    "print('BARS', tl.is_progress_bar_enabled(), not are_progress_bars_disabled(), file=sys.stderr)\n"
)


def test_third_party_progress_bars_stay_out_of_a_log(tmp_path: Path) -> None:
    env = {k: v for k, v in cli_env(tmp_path).items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "\r" not in proc.stderr and "converting" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().endswith("BARS False False"), proc.stderr


def test_tasks_list_piped_keeps_whole_ids_and_has_json(tmp_path: Path) -> None:
    env = {k: v for k, v in cli_env(tmp_path).items() if k != "COLUMNS"}  # a pipe: no terminal width at all
    table = nexus("tasks", "list", env=env, cwd=tmp_path).stdout
    ids = [t.instance_id for t in load_tasks(None)]
    assert all(f"│ {i} " in table for i in ids) and "…│" not in table.split("┃ issue")[0], table
    rows = json.loads(nexus("tasks", "list", "--json", env=env, cwd=tmp_path).stdout)
    assert [r["instance_id"] for r in rows] == ids and all(r["fail_to_pass"] > 0 and r["issue"] for r in rows)


def test_tasks_list_piped_keeps_each_issues_whole_first_line(tmp_path: Path) -> None:
    """Lines were cut at 80 characters even with no terminal width to fit (two built-in issues are longer)."""
    env = {k: v for k, v in cli_env(tmp_path).items() if k != "COLUMNS"}  # a pipe: no terminal width at all
    table = nexus("tasks", "list", env=env, cwd=tmp_path).stdout
    firsts = [next(ln.strip() for ln in t.problem_statement.splitlines() if ln.strip()) for t in load_tasks(None)]
    assert max(len(line) for line in firsts) > 80  # the case in question is among the built-in tasks
    for line in firsts:
        assert f"│ {line} " in table, line


def test_profiles_and_env_status_have_json(tmp_path: Path) -> None:
    from profilelib import save_tiny_profile

    env = cli_env(tmp_path / "home")
    assert json.loads(nexus("profiles", "--json", env=env, cwd=tmp_path).stdout) == []
    store = tmp_path / "home" / "profiles"
    store.mkdir(parents=True)
    save_tiny_profile(store / "agent.pt")
    (store / "broken.pt").write_bytes(b"not a profile")
    rows = json.loads(nexus("profiles", "--json", env=env, cwd=tmp_path).stdout)
    assert [(r["file"], r["damaged"]) for r in rows] == [("agent.pt", False), ("broken.pt", True)]
    assert rows[0]["model"] == "tiny" and rows[0]["conversations"] == 3 and rows[0]["num_layers"] == 2
    status = json.loads(nexus("env", "status", "--json", env=env, cwd=tmp_path, timeout=60).stdout)
    assert set(status["tools"]) == {"bwrap", "debootstrap", "dockerd"} and "answers" in status["docker"]


def test_the_empty_profile_store_is_listed_without_torch(tmp_path: Path) -> None:
    code = (
        "import sys\nsys.argv = ['nexus-agent', 'profiles']\nfrom cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(tmp_path))
    assert "no memory profiles in" in proc.stdout and proc.stdout.strip().endswith("NO-TORCH"), proc.stdout


@pytest.mark.usefixtures("bwrap_installed")
def test_solve_json_is_the_report_and_a_redirected_summary_is_not_wrapped(tmp_path: Path) -> None:
    out = tmp_path / ("a-folder-name-long-enough-that-its-path-passes-eighty-columns" * 2) / "run"
    env = {k: v for k, v in cli_env(tmp_path).items() if k != "COLUMNS"}
    args = ["solve", "--replay", str(GOLD_DIR / "give_up.jsonl"), "--sandbox", "bwrap"]
    res = nexus(*args, "--out", str(out), env=env, cwd=tmp_path)
    assert res.returncode == 0 and f"  files: {out}/trajectory.jsonl, patch.diff, report.json\n" in res.stdout
    res = nexus(*args, "--out", str(tmp_path / "again"), "--json", env=env, cwd=tmp_path)
    report = json.loads(res.stdout)  # stdout is the report alone; the progress went to stderr
    assert res.returncode == 0 and report == json.loads((tmp_path / "again" / "report.json").read_text())
    assert "agent ready" in res.stderr and report["status"] == "empty_patch"


@pytest.mark.usefixtures("bwrap_installed")
def test_eval_json_is_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    res = nexus("eval", "--replay-dir", str(GOLD_DIR), "--instances", "nexus-demo__pagekit-1", "--sandbox", "bwrap",
                "--out", str(out), "--json", env=cli_env(tmp_path), cwd=tmp_path)  # fmt: skip
    summary = json.loads(res.stdout)
    assert res.returncode == 0 and summary == json.loads((out / "summary.json").read_text())
    assert summary["resolved"] == 1 and "1/1 finished" in res.stderr
