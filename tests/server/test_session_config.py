"""Every session of a server opens with one SessionConfig, built once from its ServeConfig (server.config)."""

from __future__ import annotations

from kvstore.session.config import MemorySettings
from server.config import ServeConfig


def test_a_density_budget_follows_each_conversation() -> None:
    assert ServeConfig(memory=MemorySettings(budget=0.2)).session_config().cache.density_grows is True


def test_a_token_budget_stays_fixed() -> None:
    assert ServeConfig(memory=MemorySettings(budget=256)).session_config().cache.density_grows is False


def test_served_sessions_take_the_prefill_chunk() -> None:
    assert ServeConfig(chunk_size=64).session_config().cache.chunk_size == 64


def test_served_sessions_render_tools_through_the_fallback() -> None:
    assert ServeConfig().session_config().tool_fallback is True


def test_served_sessions_take_the_server_budget() -> None:
    assert ServeConfig(memory=MemorySettings(budget="300")).session_config().cache.budget == 300
