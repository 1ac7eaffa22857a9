"""The contract every sandbox backend (docker, bwrap, local) keeps. Backends do not inherit from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ExecResult:
    """What one command produced. A timeout is a result (timed_out=True, returncode -1), not an exception."""

    output: str  # stdout and stderr, interleaved as the command wrote them
    returncode: int
    timed_out: bool = False
    output_capped: bool = False  # the command printed more than the sandbox's output cap and was stopped
    disk_exceeded: str = ""  # why the task is past its disk budget (the command was stopped; the episode must end)


class SandboxError(RuntimeError):
    """A sandbox cannot be started or used (no daemon, no bubblewrap, dead container); the message says why."""


class Sandbox(Protocol):
    workdir: str  # where the repo lives inside the sandbox ("/testbed")
    tools_dir: str  # where the agent tools live inside the sandbox

    def execute(self, cmd: str, timeout: float = 120.0) -> ExecResult: ...

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, content: str) -> None: ...

    def get_patch(self) -> str:
        """`git add -A && git diff --cached <base_commit>` in the repo."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...
