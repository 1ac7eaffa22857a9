"""Record the replay test data: for each built-in task, a gold trajectory (view, fix with str_replace, test, finish)
and, for one task, a trajectory that gives up. The replies are derived from the task's gold patch; recording runs
them through the real loop, tools and bwrap sandbox, so each file holds real observations and the resulting patch.

Run from the repository root: python3 tests/agent/data/record_gold.py [INSTANCE_ID ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from agent.backends.replay import ReplayModel
from agent.environment import SandboxEnvironment
from agent.loop import Agent, AgentConfig
from agent.prompts import initial_messages
from agent.trajectory import TrajectoryWriter
from swe_env.sandbox.factory import open_sandbox
from tasks import get_task, load_tasks
from tasks.schema import Task

HERE = Path(__file__).resolve().parent
GIVE_UP_TASK = "nexus-demo__semver-lite-1"
TEST_CMD = "python3 -m pytest -q tests"  # the tests present before the task's test patch


def call(thought: str, name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return f"{thought}\n\n<function={name}>\n{body}</function>"


def hunks(patch: str) -> list[tuple[str, str, str]]:
    """(file, old text, new text) for every hunk of a unified diff."""
    out, path, old, new = [], "", [], []
    for line in [*patch.splitlines(), "@@ end"]:
        if line.startswith(("@@", "diff --git")) and (old or new):
            out.append((path, "\n".join(old), "\n".join(new)))
            old, new = [], []
        if line.startswith("+++ b/"):
            path = line[6:]
        elif line.startswith(("---", "+++", "diff --git", "index ", "@@")):
            continue
        elif line.startswith(("+", "-", " ")) or line == "":
            text = line[1:]
            if not line.startswith("+"):
                old.append(text)
            if not line.startswith("-"):
                new.append(text)
    return out


def gold_replies(task: Task, workdir: str = "/testbed") -> list[str]:
    edits = hunks(task.patch)
    files = list(dict.fromkeys(path for path, _, _ in edits))
    replies = [
        call(f"Let me read {f}, where the issue points.", "file_editor", command="view", path=f"{workdir}/{f}")
        for f in files
    ]
    replies.append(call("Run the existing tests before changing anything.", "execute_bash", cmd=TEST_CMD))
    for path, old, new in edits:
        replies.append(
            call(
                f"Fix the root cause in {path}.",
                "file_editor",
                command="str_replace",
                path=f"{workdir}/{path}",
                old_str=old,
                new_str=new,
            )
        )
    replies.append(call("Check that the tests still pass.", "execute_bash", cmd=TEST_CMD))
    replies.append(call("The fix is in place.", "finish", command="submit", result="fixed the issue"))
    return replies


def give_up_replies(task: Task, workdir: str = "/testbed") -> list[str]:
    first = hunks(task.patch)[0][0]
    return [
        call("Let me look at the code.", "file_editor", command="view", path=f"{workdir}/{first}"),
        call("I cannot find the cause; I give up.", "finish", command="submit", result="no fix"),
    ]


def record(task: Task, replies: list[str], out: Path) -> str:
    out.unlink(missing_ok=True)
    with open_sandbox(task, "bwrap") as sandbox, TrajectoryWriter(out) as writer:
        agent = Agent(ReplayModel(replies), SandboxEnvironment(sandbox), AgentConfig(), writer, task.instance_id)
        result = agent.run(initial_messages(task.problem_statement, sandbox.workdir))
    return result.exit_reason


def main(ids: list[str]) -> None:
    tasks = [get_task(i) for i in ids] if ids else load_tasks(None)
    for task in tasks:
        name = re.sub(r"[^\w.-]", "_", task.instance_id)
        print(task.instance_id, "gold:", record(task, gold_replies(task), HERE / f"{name}.gold.jsonl"))
    if not ids or GIVE_UP_TASK in ids:
        task = get_task(GIVE_UP_TASK)
        print(GIVE_UP_TASK, "gives up:", record(task, give_up_replies(task), HERE / "give_up.jsonl"))


if __name__ == "__main__":
    main(sys.argv[1:])
