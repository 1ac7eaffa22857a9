"""The project's own agent loop drives the server through its OpenAI-compatible backend: one server session per
episode, continued turn after turn, with the same replies as the local backend over the same session config."""

from __future__ import annotations

from sessionlib import qwen_tokenizer, tiny_chat_model

from agent.backends.local import LocalModel
from agent.backends.openai_compat import OpenAICompatConfig, OpenAICompatModel
from agent.environment import SandboxEnvironment
from agent.loop import Agent, AgentConfig
from agent.prompts import initial_messages
from kvstore.session.session import Session, SessionConfig
from swe_env.sandbox.factory import open_sandbox
from tasks import get_task

TASK_ID = "nexus-demo__semver-lite-1"
AGENT = AgentConfig(max_steps=4, max_steps_absolute=4, max_new_tokens=24, temperature=0.0)


def episode(model) -> list[dict]:
    with open_sandbox(get_task(TASK_ID), backend="local") as sandbox:
        result = Agent(model, SandboxEnvironment(sandbox), AGENT).run(initial_messages("Fix the bug.", "/testbed"))
    assert result.exit_reason == "abs_step_limit" and result.steps == 4  # a random model never submits
    return result.step_records


def test_agent_episode_through_the_server_continues_one_session(make_server) -> None:
    server = make_server()
    remote = episode(OpenAICompatModel(OpenAICompatConfig(model="tiny-qwen3", base_url=server.url, retries=0)))
    stats = [r["stats"] for r in remote]
    assert len({s["session_id"] for s in stats}) == 1  # every turn continued the same server session
    assert [s["turn"] for s in stats] == [1, 2, 3, 4]
    assert stats[0]["prefill_tokens"] > 500  # the system + instance prompt
    for s in stats[1:]:  # later turns prefill only the new observation, not the history
        assert s["prefill_tokens"] < s["history_tokens"] / 2 and s["held_tokens"] <= 128 + 32
    local = episode(LocalModel(Session(tiny_chat_model(), qwen_tokenizer(), SessionConfig("tiny-qwen3", budget=128))))
    assert [r["reply"] for r in remote] == [r["reply"] for r in local]
    assert [r["stats"]["evicted_tokens"] for r in remote] == [r["stats"]["evicted_tokens"] for r in local]
