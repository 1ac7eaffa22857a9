"""Fixtures of the server client's tests (agent/backends/client.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's backoff between attempts, recorded instead of slept; no API key from the environment."""
    waited: list[float] = []
    monkeypatch.setattr("agent.backends.client.time.sleep", waited.append)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return waited
