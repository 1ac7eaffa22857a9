"""Errors a user of the cache or session can cause; the message names the bad value and the fix."""

from __future__ import annotations


class KVStoreError(ValueError):
    """Bad budget, unknown policy or architecture, mismatched or corrupt session file, context overflow."""


class NamesSetting(Exception):
    """The shape of every layer's bad-setting error (kvstore's, the server's, a run's): `setting` is the field's
    name (budget, protect, drain_s, call_format) and `detail` the rest of the message; str() names the setting in
    the library's words ("budget '0': give ..."), and a front end names it in its own (the CLI, by the setting's
    flag: "--budget '0': give ...")."""

    def __init__(self, setting: str, detail: str) -> None:
        super().__init__(f"{setting} {detail}")
        self.setting, self.detail = setting, detail


class SettingError(NamesSetting, KVStoreError):
    """A setting of the cache or session (a field of MemorySettings or SessionConfig) holds a value it cannot use."""
