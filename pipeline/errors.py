"""The error of a run that cannot start as asked, shared by the run's configuration and the profile store."""

from __future__ import annotations

from agent.errors import AgentError


class RunError(AgentError):
    """A run cannot start as asked (bad flag combination, missing replay file, out dir of another run)."""
