"""The tools run inside a sandbox: one tool call becomes one command line of the sandbox's tool programs.

Arguments too long for a command line (Linux caps one argument at 128 KiB), or that no command line can carry
(a NUL byte, a lone surrogate), go through a JSON file in the sandbox's /tmp that a one-line Python launcher
reads; the tool gets them unchanged. `execute_bash` is told the step's timeout, so its own timeout note is the
one that fires, and the sandbox's (a little later) is only the backstop.
"""

from __future__ import annotations

import json
import shlex
import uuid
from dataclasses import dataclass

from agent.protocols import ToolCall, ToolResult
from swe_env.sandbox.base import Sandbox
from swe_env.tools import SUBMIT_MARKER, TOOL_NAMES, command_for

INLINE_ARGS_BYTES = 64 * 1024  # longer tool arguments travel through a file
BACKSTOP_S = 10.0  # the sandbox stops a tool this long after the tool's own timeout
# Runs <tools_dir>/<tool> with the argv list stored in the JSON file argv[1] (then deletes the file).
_LAUNCHER = (
    "import json, os, runpy, sys; f = sys.argv[1]; a = json.load(open(f)); os.unlink(f); "
    "sys.argv = a; runpy.run_path(a[0], run_name='__main__')"
)


@dataclass
class SandboxEnvironment:
    """Runs tool calls with `swe_env.tools` programs in any Sandbox (docker, bwrap, local)."""

    sandbox: Sandbox

    def execute(self, call: ToolCall, timeout: float) -> ToolResult:
        if call.name not in TOOL_NAMES:
            return ToolResult(f"Unknown tool {call.name!r}; the tools are: {', '.join(TOOL_NAMES)}.", 1)
        cmd = self._command(call)
        limit = timeout
        if call.name == "execute_bash":
            cmd, limit = f"NEXUS_EXEC_TIMEOUT={timeout:g} {cmd}", timeout + BACKSTOP_S
        res = self.sandbox.execute(cmd, timeout=limit)
        output = res.output
        submitted = call.name == "finish" and not res.timed_out and SUBMIT_MARKER in output
        if submitted:
            output = output.split(SUBMIT_MARKER, 1)[1].strip("\n")
        disk = getattr(res, "disk_exceeded", "")  # sandboxes without a disk budget leave it out
        return ToolResult(output, res.returncode, res.timed_out, submitted, limit, disk)

    def _command(self, call: ToolCall) -> str:
        cmd = command_for(call.name, call.params, self.sandbox.tools_dir)
        if _inline_ok(cmd):
            return cmd
        tool = f"{self.sandbox.tools_dir.rstrip('/')}/{call.name}"
        argv = [tool, *(f"--{k}={v}" for k, v in call.params.items())]
        path = f"/tmp/.nexus-call-{uuid.uuid4().hex}.json"
        self.sandbox.write_file(path, json.dumps(argv))  # ASCII: every character escaped, none lost
        return f"python3 -c {shlex.quote(_LAUNCHER)} {path}"

    def get_patch(self) -> str:
        return self.sandbox.get_patch()


def _inline_ok(cmd: str) -> bool:
    """Whether `cmd` can be one argument of a command line."""
    try:
        data = cmd.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(data) <= INLINE_ARGS_BYTES and b"\0" not in data
