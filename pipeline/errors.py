"""The error of a run that cannot start as asked, shared by the run's configuration and the profile store."""

from __future__ import annotations

from agent.errors import AgentError
from kvstore.errors import NamesSetting


class RunError(AgentError):
    """A run cannot start as asked (bad flag combination, missing replay file, out dir of another run)."""


class RunSettingError(NamesSetting, RunError):
    """A setting of a run (a RunConfig field) holds a value it cannot start with: "call_format json: ...", on the
    command line "--call-format json: ..." (kvstore.errors.NamesSetting)."""
