"""Turn a tool's raw output into the observation the model reads (R2E-Gym layout), and the step-count line."""

from __future__ import annotations

from agent.protocols import ToolCall, ToolResult

BASH_KEEP_LINES = 40  # bash output over 2x this many lines keeps only its first and last this many
SUBMITTED_OBSERVATION = "<<< Finished >>>"


def truncate_middle(text: str, keep: int = BASH_KEEP_LINES) -> str:
    """Keep the first and last `keep` lines of a long output, with a note where the middle was cut."""
    lines = text.splitlines()
    if len(lines) <= 2 * keep:
        return text
    rule = "-" * 50
    cut = len(lines) - 2 * keep
    return "\n".join(
        [*lines[:keep], rule, f"<{cut} lines cut from the middle of this output to save context>", rule, *lines[-keep:]]
    )


def format_observation(call: ToolCall, result: ToolResult) -> str:
    """The observation for one finished tool call (without the step-count line)."""
    if result.submitted:
        return SUBMITTED_OBSERVATION
    output = result.output
    if result.timed_out:
        limit = f" after {result.timeout_s:g} s" if result.timeout_s is not None else ""
        output = f"{output.rstrip()}\nThe command was stopped: it ran too long{limit}.".lstrip()
    if call.name == "execute_bash":
        return f"Exit code: {result.returncode}\nExecution output of [{call.name}]:\n{truncate_middle(output)}"
    return f"Execution output of [{call.name}]:\n{output}"


def steps_line(steps_remaining: int) -> str:
    """The line every observation ends with; past the soft limit it asks the model to submit."""
    if steps_remaining > 0:
        return f"Steps Remaining: {steps_remaining}"
    return "Steps Remaining: 0\nYou are out of steps. Submit your work now with the finish tool."


def with_steps(observation: str, steps_remaining: int) -> str:
    return f"{observation}\n{steps_line(steps_remaining)}"
