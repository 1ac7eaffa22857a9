"""What the live views say a task is doing now: the model's prefill (tokens run of the conversation), the running
tool with its command, in words a user knows; a real tiny model's session, chunked prefill."""

from __future__ import annotations

import time

from rich.console import Console

from cli.live import EvalView, PlainSolveView, SolveView, TaskNow, call_text, exit_words, plural
from pipeline.executors.progress import PrefillWatch, prefill_of


def test_prefill_progress_is_read_chunk_by_chunk(session) -> None:
    from kvstore.session.reply import ReplyInProgress

    assert prefill_of(session) is None and prefill_of(None) is None  # no turn open: nothing to say
    reply = ReplyInProgress(session, 4)
    reply.begin_prefill()
    seen = []
    while not reply.prefill_chunk():
        seen.append(prefill_of(session))
    total = len(session.tokens) - 1  # the first reply token is chosen by now
    assert len(seen) >= 3 and all(s is not None and s[1] == total for s in seen)
    assert [s[0] for s in seen] == sorted(s[0] for s in seen) and 0 < seen[0][0] < total  # it moves forward
    assert prefill_of(session) is None  # decoding now: no longer a prefill


def test_the_solve_view_says_what_runs_now(session) -> None:
    from kvstore.session.reply import ReplyInProgress

    now = TaskNow(5)
    assert now.line().startswith("opening the sandbox")
    now.event({"kind": "backend", "backend": type("Local", (), {"session": session})()})
    now.event({"kind": "model", "step": 1})
    reply = ReplyInProgress(session, 4)
    reply.begin_prefill()
    reply.prefill_chunk()
    assert "step 1/5: the model reads the conversation (prefill 64/" in now.line()
    now.token("def f")
    assert "step 1/5: the model writes its reply (5 characters so far)" in now.line()
    now.event({"kind": "tool", "step": 1, "tool": "execute_bash", "params": {"cmd": "python -m pytest -q\n tests"}})
    line = now.line()
    assert line.startswith("step 1/5: running execute_bash: python -m pytest -q tests, 0 s so far | ")
    view = SolveView(Console(record=True, width=200), "task", 5)
    view.on_event({"kind": "grading"})
    assert "grading the patch" in str(view.render().caption)


def test_a_workers_prefill_reaches_the_eval_view(session) -> None:
    from kvstore.session.reply import ReplyInProgress

    sent: list[dict] = []
    with PrefillWatch(lambda kind, **data: sent.append({"kind": kind, **data}), every=0.01) as watch:
        watch.event({"kind": "backend", "backend": type("Local", (), {"session": session})()})
        reply = ReplyInProgress(session, 4)
        reply.begin_prefill()
        reply.prefill_chunk()
        watch.event({"kind": "model", "step": 2})  # the model works on step 2, one chunk of its prefill run
        end = time.monotonic() + 5
        while not sent and time.monotonic() < end:
            time.sleep(0.01)
    assert sent and sent[0]["phase"] == "model" and sent[0]["step"] == 2 and sent[0]["prefill"][0] == 64
    view = EvalView(Console(record=True, width=200), 3)
    view.event({"kind": "start", "worker": "w1", "instance_id": "task-1"})
    view.event({"worker": "w1", "instance_id": "task-1", **sent[0]})
    console = Console(record=True, width=200)
    console.print(view.render())
    assert f"the model reads the conversation (prefill 64/{sent[0]['prefill'][1]} tokens)" in console.export_text()


def test_words_a_user_knows() -> None:
    assert exit_words("abs_step_limit") == "step limit reached" and exit_words("agent") == "submitted"
    assert plural(1, "turn") == "1 turn" and plural(2, "turn") == "2 turns"
    assert call_text("file_editor", {"command": "view", "path": "/testbed/a.py"}) == "file_editor: view /testbed/a.py"
    assert call_text("execute_bash", {"cmd": "x" * 100}, 20) == "execute_bash: " + "x" * 19 + "…"


def _built_env_events(tmp_path) -> list[dict]:
    """run_task's events of a real first build: an offline env for a one-commit mirror, in a bubblewrap sandbox."""
    import subprocess

    from swe_env.pyenv import PyEnvConfig, build_progress
    from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox
    from tasks.schema import Task

    repo = tmp_path / "mirrors" / "acme__widget"
    (repo / "widget").mkdir(parents=True)
    (repo / "widget" / "__init__.py").write_text("")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run([*git, *cmd], cwd=repo, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    pyenv = PyEnvConfig(tmp_path / "envs", test_packages=(), pip_args=("--no-index",))
    cfg = BwrapConfig(repo_cache=repo.parent, install_tools=False, pyenv=pyenv)
    heard: list[dict] = []
    with (
        build_progress(heard.append),
        BwrapSandbox(Task("acme__widget-1", "acme/widget", sha, "x", version="0.1"), cfg),
    ):
        pass
    return heard


def test_a_first_env_build_is_said_with_its_time(tmp_path, bwrap_installed) -> None:
    start, done = _built_env_events(tmp_path)
    building = "building the Python environment for acme/widget 0.1 (first use; cached afterwards)"
    now = TaskNow(5)
    now.event(start)
    assert now.line().startswith(building + ", 0 s so far | ")  # the live view's line, with its time
    plain = Console(record=True, width=300, force_terminal=False)
    view = PlainSolveView(plain, "task", 5)
    view.on_event(start)
    view.on_event(done)
    lines = plain.export_text().splitlines()
    assert (
        lines[1] == building
        and lines[2]
        == f"the Python environment for acme/widget 0.1 built in {done['seconds']:.0f} s; opening the sandbox"
    )
    sent: list[dict] = []  # an eval worker passes both on (pipeline.executors.work -> PrefillWatch)
    with PrefillWatch(lambda kind, **data: sent.append({"kind": kind, **data})) as watch:
        watch.event(start)
        watch.event(done)
    assert [e["phase"] for e in sent] == ["env_build", "env_built"] and sent[1]["seconds"] == done["seconds"]
    console = Console(record=True, width=300, force_terminal=False)
    eval_view = EvalView(console, 3)
    eval_view.event({"kind": "start", "worker": "w1", "instance_id": "task-1"})
    for ev in sent:
        eval_view.event({"worker": "w1", "instance_id": "task-1", **ev})
    said = console.export_text()
    assert f"task-1 (worker w1): {building}" in said and "built in" in said


def test_the_solve_view_shows_each_call_and_the_latest_output() -> None:
    """Issue 66: a row names the call (command, path, search term), not the tool alone, and the last lines of the
    latest step's output stand under the table."""
    console = Console(record=True, width=120)
    view = SolveView(console, "task", 5)
    output = "Exit code: 1\n[STDOUT]\n" + "\n".join(f"line {i}" for i in range(10)) + "\n\n"
    view.on_step({"step": 1, "call": {"name": "execute_bash", "params": {"cmd": "python -m pytest -q tests"}},
                  "stats": {}, "model_s": 1.0, "env_s": 2.0, "observation": output})  # fmt: skip
    console.print(view._current())
    shown = console.export_text()
    assert "execute_bash: python -m pytest -q tests" in shown
    assert "output of step 1 (last 4 lines):" in shown
    assert "line 9" in shown
    assert "line 5" not in shown
