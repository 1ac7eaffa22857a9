"""Turn a tool's raw output into the observation the model reads (R2E-Gym layout), and the step-count line.

An output longer than the run's `observation_chars` keeps its head and tail around one line saying how much was
cut and where the full output was kept: a command may print up to the sandbox's 32 MiB and a backend tokenizes all
it is sent, so the cut comes here, before any backend sees the text.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.protocols import ToolCall, ToolResult

BASH_KEEP_LINES = 40  # bash output over 2x this many lines keeps only its first and last this many
SUBMITTED_OBSERVATION = "<<< Finished >>>"
OBSERVATION_CHARS = 40_000  # the default cut (about 10K tokens); AgentConfig.observation_chars sets it per run
HEAD_SHARE = 0.6  # of a cut output's room: the head shows what ran and the first errors, the tail how it ended
SHORT_LINE = 2_000  # a cut moves to a line boundary at most this far; longer lines (minified, base64) are split
KeepFull = Callable[[str], str | None]  # saves an output that is being cut; where it went, or None: not kept


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


def cut_middle(text: str, limit: int, where: str | None, max_lines: int | None = None) -> str:
    """`text` if it has at most `limit` characters, else its head and tail (each also at most `max_lines` lines)
    around one line saying how much was cut and where the full text is (`where`; None: it was not kept)."""
    if len(text) <= limit:
        return text
    head_chars = int(limit * HEAD_SHARE)
    end, start = _head_end(text, head_chars, max_lines), _tail_start(text, limit - head_chars, max_lines)
    head = text[:end] if end == 0 or text[end - 1] == "\n" else text[:end] + "\n"
    kept = f"the full output is in {where}" if where else "the full output was not kept"
    lines = text.count("\n", end, start)
    note = f"[... {start - end:,} characters ({lines:,} lines) cut here; {kept} ...]"
    return f"{head}{note}\n{text[start:]}"


def _head_end(text: str, chars: int, max_lines: int | None) -> int:
    """Where the head ends: after `chars` characters, back at a line end when that line is short, and no later
    than the end of line `max_lines`."""
    end = chars
    newline = text.rfind("\n", 0, end)
    if newline >= 0 and end - (newline + 1) <= min(SHORT_LINE, chars // 4):
        end = newline + 1
    return min(end, _after_lines(text, max_lines)) if max_lines else end


def _tail_start(text: str, chars: int, max_lines: int | None) -> int:
    """Where the tail starts: `chars` characters before the end, moved on to a line start when that line is short,
    and no earlier than the start of the last `max_lines` lines. Only called with len(text) > chars."""
    start = len(text) - chars
    newline = text.find("\n", start - 1, start + min(SHORT_LINE, chars // 4))
    if newline >= 0:
        start = newline + 1
    return max(start, _before_lines(text, max_lines)) if max_lines else start


def _after_lines(text: str, lines: int) -> int:
    """The index after the first `lines` lines (their "\\n" included)."""
    pos = 0
    for _ in range(lines):
        pos = text.find("\n", pos) + 1
        if pos == 0:
            return len(text)
    return pos


def _before_lines(text: str, lines: int) -> int:
    """The index where the last `lines` lines start (a final "\\n" ends the last line, it starts none)."""
    pos = len(text) - 1 if text.endswith("\n") else len(text)
    for _ in range(lines):
        pos = text.rfind("\n", 0, pos)
        if pos < 0:
            return 0
    return pos + 1


def format_observation(
    call: ToolCall, result: ToolResult, limit: int = OBSERVATION_CHARS, keep_full: KeepFull | None = None
) -> str:
    """The observation for one finished tool call (without the step-count line). An output over `limit` characters
    is cut (`cut_middle`) once `keep_full` has saved it whole."""
    if result.submitted:
        return SUBMITTED_OBSERVATION
    output, bash = _with_timeout_note(result), call.name == "execute_bash"
    if len(output) > limit:
        where = keep_full(output) if keep_full is not None else None
        output = cut_middle(output, limit, where, BASH_KEEP_LINES if bash else None)
    elif bash:
        output = truncate_middle(output)
    if bash:
        return f"Exit code: {result.returncode}\nExecution output of [{call.name}]:\n{output}"
    return f"Execution output of [{call.name}]:\n{output}"


def _with_timeout_note(result: ToolResult) -> str:
    if not result.timed_out:
        return result.output
    limit = f" after {result.timeout_s:g} s" if result.timeout_s is not None else ""
    return f"{result.output.rstrip()}\nThe command was stopped: it ran too long{limit}.".lstrip()


def steps_line(steps_remaining: int) -> str:
    """The line every observation ends with; past the soft limit it asks the model to submit."""
    if steps_remaining > 0:
        return f"Steps Remaining: {steps_remaining}"
    return "Steps Remaining: 0\nYou are out of steps. Submit your work now with the finish tool."


def with_steps(observation: str, steps_remaining: int) -> str:
    return f"{observation}\n{steps_line(steps_remaining)}"
