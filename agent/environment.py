"""The tools run inside a sandbox: one tool call becomes one command line of the sandbox's tool programs."""

from __future__ import annotations

from dataclasses import dataclass

from agent.protocols import ToolCall, ToolResult
from swe_env.sandbox.base import Sandbox
from swe_env.tools import SUBMIT_MARKER, command_for


@dataclass
class SandboxEnvironment:
    """Runs tool calls with `swe_env.tools` programs in any Sandbox (docker, bwrap, local)."""

    sandbox: Sandbox

    def execute(self, call: ToolCall, timeout: float) -> ToolResult:
        cmd = command_for(call.name, call.params, self.sandbox.tools_dir)
        res = self.sandbox.execute(cmd, timeout=timeout)
        output = res.output
        submitted = call.name == "finish" and not res.timed_out and SUBMIT_MARKER in output
        if submitted:
            output = output.split(SUBMIT_MARKER, 1)[1].strip("\n")
        return ToolResult(output, res.returncode, res.timed_out, submitted, timeout)

    def get_patch(self) -> str:
        return self.sandbox.get_patch()
