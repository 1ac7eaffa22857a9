"""ReplayModel: the recorded assistant messages, in order, then a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.backends.replay import ReplayModel
from agent.errors import AgentError
from agent.protocols import Sampling
from agent.trajectory import TrajectoryWriter


def test_replays_in_order_then_runs_out(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.header("t", "m", {})
        for n in (1, 2):
            w.write("step", step=n, reply=f"reply {n}")
    model = ReplayModel.from_file(path)
    assert model.name == "replay:t.jsonl" and model.remaining == 2
    assert [model.reply([], Sampling()).text for _ in range(2)] == ["reply 1", "reply 2"]
    with pytest.raises(AgentError, match=r"all 2 recorded replies in .*t.jsonl were used"):
        model.reply([{"role": "user", "content": "more?"}], Sampling())


def test_a_file_without_replies_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.header("t", "m", {})
    with pytest.raises(AgentError, match="no assistant messages"):
        ReplayModel.from_file(path)
