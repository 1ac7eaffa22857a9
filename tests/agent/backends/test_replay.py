"""ReplayModel: the recorded assistant messages, in order, then a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.backends.replay import ReplayModel, load_recording
from agent.errors import AgentError
from agent.protocols import Sampling
from agent.trajectory import TrajectoryWriter


def test_replays_in_order_then_runs_out(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.header("t", "m", {})
        w.write("step", step=1, reply="reply 1", context_tokens=900)
        w.write("step", step=2, reply="reply 2")  # hand-written data may leave the count out
    model = ReplayModel.from_file(path)
    assert model.name == "replay:t.jsonl"
    assert model.remaining == 2
    replies = [model.reply([], Sampling()) for _ in range(2)]
    assert [(r.text, r.context_tokens) for r in replies] == [("reply 1", 900), ("reply 2", None)]
    with pytest.raises(AgentError, match=r"all 2 recorded replies in .*t.jsonl were used"):
        model.reply([{"role": "user", "content": "more?"}], Sampling())


def test_a_file_without_replies_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.header("t", "m", {})
    with pytest.raises(AgentError, match="no assistant messages"):
        ReplayModel.from_file(path)


@pytest.mark.parametrize(
    "text, why",
    [("", "it holds no record"), ("{bad\n", "its only line is not a JSON record")],
)
def test_a_file_with_no_record_is_not_a_trajectory(tmp_path: Path, text: str, why: str) -> None:
    """A lone bad line is what load_trajectory reads as a cut last line; a replay has nothing to run from it."""
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(AgentError, match=rf"t.jsonl is not a trajectory: {why}"):
        load_recording(path)
