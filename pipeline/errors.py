"""The error of a run that cannot start as asked, shared by the run's configuration and the profile store."""

from __future__ import annotations

from agent.errors import AgentError


class RunError(AgentError):
    """A run cannot start as asked (bad flag combination, missing replay file, out dir of another run)."""


class RunSettingError(RunError):
    """A setting of a run (a RunConfig or MemorySettings field) holds a value it cannot start with.

    `setting` is the field's name and `detail` the rest of the message; str() names the setting as the field
    ("call_format 'json': ..."), the CLI by its flag ("--call-format 'json': ...")."""

    def __init__(self, setting: str, detail: str) -> None:
        super().__init__(f"{setting} {detail}")
        self.setting, self.detail = setting, detail
