"""Fixtures of the agent tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_testlib import STYLES, DirSandbox, make_sandbox


@pytest.fixture
def sandbox(tmp_path: Path) -> DirSandbox:
    """A real git repo with a bug in calc.add and the real tools, commands run by bash on the host."""
    return make_sandbox(tmp_path)


@pytest.fixture(params=STYLES)
def style(request: pytest.FixtureRequest) -> str:
    """How the scripted model writes its calls: each loop test that applies to both call formats runs in each."""
    return request.param
