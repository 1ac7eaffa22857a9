"""The system prompt (tools + call format) and the instance prompt (the issue and a way to work on it)."""

from __future__ import annotations

from agent.tool_specs import TOOLS, ToolSpec

CALL_FORMAT = """\
<function=TOOL_NAME>
<parameter=PARAM_NAME>value</parameter>
<parameter=OTHER_PARAM>a value
that may span several lines</parameter>
</function>"""

FORMAT_RULES = f"""\
How to call a tool: end your reply with exactly one call written like this

{CALL_FORMAT}

Rules:
- Exactly one function call per reply, and it comes last: write nothing after </function>.
- Reason in free text first if it helps, then make the call.
- Every parameter marked required must be given; use only the parameters listed for that tool.
- The result of the call comes back in the next message."""

NO_CALL_REMINDER = f"""\
Your reply did not contain a function call, so nothing was run. Every reply must end with one call:

{CALL_FORMAT}

When the task is done, call `finish` with <parameter=command>submit</parameter>."""


def render_tool(index: int, spec: ToolSpec) -> str:
    """One tool block for the system prompt: name, description, parameters."""
    lines = [f"--- TOOL {index}: {spec.name} ---", "", spec.description, "", "Parameters:"]
    for n, p in enumerate(spec.params, 1):
        need = "required" if p.required else "optional"
        lines.append(f"  ({n}) {p.name} ({need}): {p.description}")
        if p.choices:
            lines.append(f"      allowed values: {', '.join(p.choices)}")
    lines.append(f"--- END TOOL {index} ---")
    return "\n".join(lines)


def system_prompt(tools: dict[str, ToolSpec] = TOOLS) -> str:
    """Who the model is, the tools it may call, then the call format."""
    blocks = "\n\n".join(render_tool(i, spec) for i, spec in enumerate(tools.values(), 1))
    return (
        "You are a software engineer working in a code repository through a small set of tools.\n\n"
        f"The tools:\n\n{blocks}\n\n{FORMAT_RULES}"
    )


TOOLS_RULES = """\
The tools are given to you as functions. Call exactly one of them per reply, with its arguments as a JSON object;
reason in free text first if it helps. The result of the call comes back in the next message."""

NO_TOOL_CALL_REMINDER = """\
Your reply did not call a tool, so nothing was run. Every reply must call exactly one of the tools you were given.
When the task is done, call `finish` with {"command": "submit"}."""


def tools_system_prompt() -> str:
    """The system prompt of native tool calls: the tools themselves travel as function specs (agent.calls_tools)."""
    return f"You are a software engineer working in a code repository through a small set of tools.\n\n{TOOLS_RULES}"


INSTANCE_TEMPLATE = """\
A code repository is checked out in {workdir}. Here is an issue reported against it:

<github_issue>
{issue}
</github_issue>

Change the non-test files in {workdir} so that the behaviour described in the issue is fixed. The tests for the
issue are already taken care of: do not edit existing test files.

A way to go about it:
1. Explore the repository to find the code involved.
2. Write a small script that reproduces the problem, and run it with `python <script>` through execute_bash.
3. Work out the root cause before you change anything.
4. Make the smallest change that fixes the root cause.
5. Run your script again to confirm the problem is gone.
6. Run the existing unit tests of the code you changed, to be sure nothing else broke.
7. Think about edge cases, and check that your fix handles them.
8. Call finish with command=submit.

Aim for a complete, careful fix rather than a quick one."""


def instance_prompt(issue: str, workdir: str = "/testbed") -> str:
    """The first user message: the issue inside <github_issue> tags, the working directory, the method."""
    return INSTANCE_TEMPLATE.format(issue=issue.strip(), workdir=workdir)


def initial_messages(issue: str, workdir: str = "/testbed") -> list[dict[str, str]]:
    """System + instance prompt, the first messages of an episode."""
    return [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": instance_prompt(issue, workdir)},
    ]
