"""Long tool output: the model gets its head and tail around one line saying what was cut, the run folder keeps the
whole text, and the backend never receives more than the cut (the loop over real tools, a scripted model)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from agent_testlib import DirSandbox, call, make_sandbox

from agent.environment import SandboxEnvironment
from agent.loop import Agent, AgentConfig
from agent.observation import cut_middle, format_observation
from agent.outputs import keep_output
from agent.prompts import initial_messages
from agent.protocols import Message, ModelReply, Sampling, ToolCall, ToolResult
from agent.trajectory import TrajectoryWriter, load_trajectory
from pipeline.chat import ChatEnvironment

NOTE = re.compile(r"^\[\.\.\. ([\d,]+) characters \(([\d,]+) lines\) cut here; (.*) \.\.\.\]$", re.M)
HUGE_TEXT = "START\n" + "#" * 5_000_000 + "\nEND\n"  # one line of 5 million characters between two short ones
LONG = "seq 1 100000"  # 588,895 characters: under execute_bash's own cap (512 KiB of each end of a stream)
SLACK = 300  # the observation's first lines, the note and the steps line


class RecordingModel:
    """A scripted backend that keeps every message it is sent."""

    name = "recording"

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.received: list[Message] = []

    def reply(self, new_messages: list[Message], sampling: Sampling) -> ModelReply:
        self.received.extend(new_messages)
        return ModelReply(self.replies.pop(0))


def run(sandbox: DirSandbox, reply: str, folder: Path | None, **cfg: object) -> tuple[RecordingModel, str]:
    """One call then finish; the backend and the observation of the call."""
    model = RecordingModel([reply, call("finish", command="submit")])
    writer = TrajectoryWriter(folder / "trajectory.jsonl") if folder is not None else None
    res = Agent(model, SandboxEnvironment(sandbox), AgentConfig(**cfg), writer).run(initial_messages("x"))
    if writer is not None:
        writer.close()
    return model, res.step_records[0]["observation"]


def bash(cmd: str) -> str:
    return call("execute_bash", cmd=cmd)


def test_huge_output_reaches_the_model_cut_and_the_run_folder_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEXUS_VIEW_MAX_CHARS", "10000000")  # file_editor shows the whole file: 5 MB of output
    sandbox = make_sandbox(tmp_path)
    (Path(sandbox.workdir) / "big.txt").write_text(HUGE_TEXT)
    view = call("file_editor", command="view", path=f"{sandbox.workdir}/big.txt")
    model, obs = run(sandbox, view, tmp_path / "run")
    assert model.received[-1]["content"] == obs  # what the backend got is the cut observation
    assert max(len(m["content"]) for m in model.received[2:]) <= 40_000 + SLACK
    head, tail = obs.split("\n[... ")
    assert head.startswith("Execution output of [file_editor]:\nHere's the result of running `cat -n`")
    assert re.search(r"\s1\s+START\n\s+2\s+#{1000}", head) and re.search(r"#{1000}\n\s+3\s+END\n\n", tail)
    assert 0.6 * 40_000 - 200 <= head.count("#") <= 0.6 * 40_000 and 0.4 * 40_000 - 50 <= tail.count("#") <= 16_000
    assert tail.endswith("\nSteps Remaining: 39")
    cut, lines, where = NOTE.search(obs).groups()
    assert int(cut.replace(",", "")) == 5_000_000 - obs.count("#") and lines == "0"
    path = tmp_path / "run" / "outputs" / "step-1.txt"
    assert where == f"the full output is in {path}"
    full = path.read_text(encoding="utf-8")
    assert re.search(r"\n\s+2\s+(#+)\n\s+3\s+END\n", full).group(1) == "#" * 5_000_000 and len(full) < 5_000_300
    mode = (tmp_path / "run" / "trajectory.jsonl").stat().st_mode & 0o777
    assert path.stat().st_mode & 0o777 == mode & 0o644  # as the trajectory, never group- or world-writable
    assert load_trajectory(tmp_path / "run" / "trajectory.jsonl").steps[0]["observation"] == obs


def test_many_short_lines_keep_40_lines_each_end_and_count_the_rest(sandbox: DirSandbox, tmp_path: Path) -> None:
    _, obs = run(sandbox, bash(LONG), tmp_path, observation_chars=10_000)
    path = tmp_path / "outputs" / "step-1.txt"
    lines = path.read_text().splitlines(keepends=True)
    head, tail = "".join(lines[:40]), "".join(lines[-40:])
    cut = "".join(lines[40:-40])
    note = f"[... {len(cut):,} characters ({len(lines) - 80:,} lines) cut here; the full output is in {path} ...]"
    assert obs == f"Exit code: 0\nExecution output of [execute_bash]:\n{head}{note}\n{tail}\nSteps Remaining: 39"
    assert "\n1\n2\n" in head and "\n99999\n100000\n" in tail and "\n50000\n" in cut


def test_small_output_is_unchanged_and_nothing_is_written(sandbox: DirSandbox, tmp_path: Path) -> None:
    model, obs = run(sandbox, bash("echo hello"), tmp_path)
    output = "[STDOUT]\n\nhello\n\n[STDERR]\n\n\n"  # the tool's layout
    assert obs == f"Exit code: 0\nExecution output of [execute_bash]:\n{output}\nSteps Remaining: 39"
    assert model.received[-1]["content"] == obs and not (tmp_path / "outputs").exists()


def test_without_a_run_folder_the_note_says_the_output_was_not_kept(sandbox: DirSandbox) -> None:
    model, obs = run(sandbox, bash(LONG), None, observation_chars=1_000)
    assert NOTE.search(obs).group(3) == "the full output was not kept"
    assert len(model.received[-1]["content"]) <= 1_000 + SLACK


def test_a_symlink_is_never_written_through(sandbox: DirSandbox, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "outputs").symlink_to(target)
    _, obs = run(sandbox, bash(LONG), tmp_path / "run", observation_chars=1_000)
    assert NOTE.search(obs).group(3) == "the full output was not kept" and not any(target.iterdir())
    (tmp_path / "run" / "outputs").unlink()
    (tmp_path / "run" / "outputs").mkdir()
    (tmp_path / "run" / "outputs" / "step-1.txt").symlink_to(target / "victim")
    _, obs = run(sandbox, bash(LONG), tmp_path / "run", observation_chars=1_000)
    assert NOTE.search(obs).group(3).endswith("outputs/step-1-2.txt") and not (target / "victim").exists()


def test_chat_episodes_keep_each_output_and_send_only_the_cut(sandbox: DirSandbox, tmp_path: Path) -> None:
    model = RecordingModel([bash(LONG), call("finish", command="submit")] * 2)
    writer = TrajectoryWriter(tmp_path / "session" / "trajectory.jsonl")
    agent = Agent(model, ChatEnvironment(sandbox), AgentConfig(observation_chars=2_000), writer, "chat:t")
    agent.run(initial_messages("x"))
    agent.run([{"role": "user", "content": "again"}])  # the second episode counts its steps from 1 again
    writer.close()
    files = sorted(p.name for p in (tmp_path / "session" / "outputs").iterdir())
    assert files == ["step-1-2.txt", "step-1.txt"]
    texts = [(tmp_path / "session" / "outputs" / f).read_text() for f in files]
    assert texts[0] == texts[1] and "\n1\n2\n" in texts[0] and "\n50000\n" in texts[0]
    assert max(len(m["content"]) for m in model.received[2:]) <= 2_000 + SLACK


def test_cut_keeps_characters_whole_and_lines_where_they_are_short(tmp_path: Path) -> None:
    text = "é🙂\n" * 30_000  # 3 characters a line, 2 and 4 bytes in UTF-8
    lines = cut_middle(text, 1_000, "/f").splitlines()
    note = next(n for n, line in enumerate(lines) if line.startswith("[... "))
    assert set(lines[:note]) == set(lines[note + 1 :]) == {"é🙂"}
    cut, n_lines, _ = NOTE.fullmatch(lines[note]).groups()
    assert (note, len(lines) - note - 1) == (200, 133)  # 600 and 400 characters, whole lines
    assert (int(cut.replace(",", "")), int(n_lines.replace(",", ""))) == (len(text) - 3 * 333, 30_000 - 333)
    assert Path(keep_output(tmp_path, 7, text)).read_bytes() == text.encode("utf-8")
    out = cut_middle("a" * 100_000, 1_000, None)  # one long line: cut inside it
    assert (
        out
        == "a" * 600 + "\n[... 99,000 characters (0 lines) cut here; the full output was not kept ...]\n" + "a" * 400
    )


def test_every_tool_output_is_cut_not_only_bash() -> None:
    result = ToolResult("y" * 50_000 + "\nThe end.", timed_out=True, timeout_s=5.0)
    kept: list[str] = []

    def keep(text: str) -> str:
        kept.append(text)
        return "/k/step-1.txt"

    obs = format_observation(ToolCall("file_editor", {}), result, 1_000, keep)
    assert obs.startswith("Execution output of [file_editor]:\nyyy") and len(obs) <= 1_000 + SLACK
    assert obs.endswith("The end.\nThe command was stopped: it ran too long after 5 s.")
    assert kept == [result.output + "\nThe command was stopped: it ran too long after 5 s."]
    assert NOTE.search(obs).group(3) == "the full output is in /k/step-1.txt"
