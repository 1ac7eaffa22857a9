"""`solve --server` (and `chat --server`, tests/cli/test_chat_server.py) teach the server a memory profile: a run
whose server session found none sends its conversation and its task's statement to POST /v1/nexus/profiles when it
ends (pipeline.profiles.learn.learn_served), and the server's later sessions of that agent match it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kvstore.profiles.profile import MemoryProfile

TASKS = ("nexus-demo__semver-lite-1", "nexus-demo__iniconf-1", "nexus-demo__csvkit-lite-1")


def _nexus(tmp_path: Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, "NEXUS_AGENT_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    res = subprocess.run(
        [sys.executable, "-c", "from cli.app import main; main()", *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, input=stdin,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return " ".join(res.stdout.split())


def _used(trajectory: Path) -> list[str | None]:
    steps = [json.loads(x) for x in trajectory.read_text().splitlines()]
    return [s["stats"].get("memory_profile") for s in steps if s.get("type") == "step"]


def test_a_served_solve_teaches_the_server_its_agents_profile(make_server, tmp_path: Path) -> None:
    from pipeline.profiles.learn import learn_served
    from tasks import get_task

    store = tmp_path / "store"
    store.mkdir()
    server = make_server(budget=512, profile=store)

    def solve(task: str, *more: str) -> str:  # the agent's XML prompt, as the gold conversation it learns from
        args = ["solve", task, "--server", server.url, "--sandbox", "local", "--max-steps", "1", "--max-new-tokens",
                "4", "--call-format", "xml", "--out", str(tmp_path / task), *more]  # fmt: skip
        return _nexus(tmp_path, *args)

    assert "server learned" not in solve(TASKS[0]) and not list(store.iterdir())  # the default: no learning
    said = solve(TASKS[1], "--learn-profile")  # asked, but the tiny random model made no valid tool call
    assert "memory profile: not learned (this run made no valid tool call" in said and not list(store.iterdir())

    gold = Path(__file__).parents[1] / "agent" / "data" / f"{TASKS[1]}.gold.jsonl"  # a conversation of tool calls
    said = learn_served(server.url, gold, get_task(TASKS[1]).problem_statement) or ""
    (learned,) = store.glob("*.pt")
    assert (
        "memory profile: the server learned" in said and "from 1 conversation" in said and f"-> {learned.name}" in said
    )
    profile = MemoryProfile.load(learned)
    assert profile.conversations == 1 and profile.meta["served"] is True

    said = solve(TASKS[2], "--learn-profile")  # the server's next session of the agent matches it: nothing to teach
    assert "server learned" not in said and "the server has one" not in said
    used = _used(tmp_path / TASKS[2] / "trajectory.jsonl")
    assert used and all(u is not None and u.startswith("matched") and learned.name in u for u in used)
    assert list(store.glob("*.pt")) == [learned]
