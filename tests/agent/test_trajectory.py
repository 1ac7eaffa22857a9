"""Trajectory files: written record by record, read back (a cut last line is tolerated), exported as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.errors import AgentError
from agent.trajectory import TrajectoryWriter, load_trajectory


def write_sample(path: Path) -> None:
    with TrajectoryWriter(path) as w:
        w.header("t-1", "m", {"max_steps": 3}, seed=7)
        w.write(
            "step",
            step=1,
            input=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            reply="r1",
            stats={"evicted_tokens": 5},
        )
        w.write("step", step=2, input=[{"role": "user", "content": "o1"}], reply="r2")
        w.write("footer", exit_reason="agent", patch="diff", steps=2)


def test_round_trip_and_json_export(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "t.jsonl"
    write_sample(path)
    traj = load_trajectory(path)
    assert traj.header["task_id"] == "t-1" and traj.header["meta"] == {"seed": 7}
    assert traj.replies() == ["r1", "r2"] and traj.exit_reason == "agent" and traj.patch == "diff"
    assert [m["content"] for m in traj.messages()] == ["s", "u", "r1", "o1", "r2"]
    traj.save_json(tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc == json.loads(json.dumps(traj.to_json()))
    assert doc["steps"][0]["stats"] == {"evicted_tokens": 5} and doc["footers"][0]["steps"] == 2


def test_each_record_is_on_disk_before_the_next(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    w = TrajectoryWriter(path)
    w.header("t", "m", {})
    w.write("step", step=1, reply="r1")
    assert load_trajectory(path).replies() == ["r1"]  # readable while the writer is still open
    w.close()


def test_truncated_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_sample(path)
    text = path.read_text().splitlines()
    path.write_text("\n".join(text[:3]) + "\n" + text[3][:10])  # crash in the middle of writing step 3's record
    traj = load_trajectory(path)
    assert traj.truncated and traj.replies() == ["r1", "r2"] and traj.footer is None


def test_bad_lines_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"type": "header"}\nnot json\n{"type": "footer"}\n')
    with pytest.raises(AgentError, match=r"t.jsonl:2: not a JSON record"):
        load_trajectory(path)
    path.write_text('{"type": "what"}\n')
    with pytest.raises(AgentError, match="unknown record type"):
        load_trajectory(path)
    path.write_text("[1, 2]\n{}\n")
    with pytest.raises(AgentError, match=r"t.jsonl:1: not a trajectory record \(a JSON object"):
        load_trajectory(path)
    path.write_text('{"type": "step", "step": 1}\n')
    with pytest.raises(AgentError, match="needs a 'reply'"):
        load_trajectory(path)
    with pytest.raises(AgentError, match="not found"):
        load_trajectory(tmp_path / "missing.jsonl")


def test_a_folder_is_not_a_trajectory_file(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match=r"is a folder, not a trajectory file"):
        load_trajectory(tmp_path)
