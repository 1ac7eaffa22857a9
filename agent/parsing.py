"""Parse the one `<function=NAME>` call a reply must end with; any problem is a FormatError for the model to read."""

from __future__ import annotations

import re

from agent.errors import FormatError
from agent.prompts import CALL_FORMAT, NO_CALL_REMINDER
from agent.protocols import ToolCall
from agent.tool_specs import TOOLS, ToolSpec

_OPEN = re.compile(r"<function\s*=\s*([^<>\n]*?)\s*>")
_CLOSE = re.compile(r"</function\s*>")
_PARAM_OPEN = re.compile(r"<parameter\s*=\s*([^<>\n]*?)\s*>")
_PARAM_CLOSE = re.compile(r"</parameter\s*>")


def parse_call(text: str, tools: dict[str, ToolSpec] = TOOLS) -> ToolCall:
    """The single tool call in `text`, checked against `tools`.

    Tolerates whitespace around names and between parameters, values spanning lines, and a missing
    `</function>` at the very end (the stop string may have cut it). A value is stripped of surrounding
    whitespace, except a text whose whitespace matters (`Param.exact`: a file's text, a str_replace's old and new
    text), which loses only the newline the call format puts after its opening tag and before its closing tag.
    Text after the call is ignored unless it holds a second call.
    """
    start = _OPEN.search(text)
    if start is None:
        if re.search(r"<\s*function\b", text):
            raise FormatError(bad(f"the function call is malformed. Write it exactly as:\n\n{CALL_FORMAT}"))
        raise FormatError(NO_CALL_REMINDER)
    spec = find_tool(start.group(1), tools)
    params, pos = _params(text, start.end(), spec)
    rest = text[pos:].lstrip()
    close = _CLOSE.match(rest)
    if close is None and rest:
        raise FormatError(bad(_unexpected(rest, spec)))
    if close is not None and _OPEN.search(rest, close.end()):
        raise FormatError(bad("it contains more than one function call; make exactly one call per reply"))
    check_params(params, spec)
    return ToolCall(name=spec.name, params=params, thought=text[: start.start()].strip())


def bad(why: str) -> str:
    return f"ERROR: your reply could not be run: {why}" + ("" if why.endswith(">") else ".")


def _unexpected(rest: str, spec: ToolSpec) -> str:
    if _OPEN.match(rest):
        return "it contains more than one function call; make exactly one call per reply"
    return f"the call to {spec.name} is malformed; it must hold only <parameter=NAME>value</parameter> lines"


def find_tool(name: str, tools: dict[str, ToolSpec]) -> ToolSpec:
    if name not in tools:
        shown = name or "(empty)"
        raise FormatError(bad(f"there is no tool named '{shown}'; the tools are: {', '.join(tools)}"))
    return tools[name]


def _params(text: str, pos: int, spec: ToolSpec) -> tuple[dict[str, str], int]:
    """Read consecutive <parameter=KEY>VALUE</parameter> blocks from `pos`; return them and where they end."""
    params: dict[str, str] = {}
    while (m := _PARAM_OPEN.match(text, _skip_space(text, pos))) is not None:
        key = m.group(1)
        end = _PARAM_CLOSE.search(text, m.end())
        if end is None:
            raise FormatError(bad(f"parameter '{key}' of {spec.name} has no closing </parameter>"))
        if spec.param(key) is None:
            allowed = ", ".join(p.name for p in spec.params)
            raise FormatError(bad(f"{spec.name} has no parameter '{key}'; its parameters are: {allowed}"))
        if key in params:
            raise FormatError(bad(f"parameter '{key}' is given twice"))
        params[key] = _value(text[m.end() : end.start()], spec.param(key).exact)
        pos = end.end()
    return params, pos


def _value(raw: str, exact: bool) -> str:
    if not exact:
        return raw.strip()
    raw = raw[2:] if raw.startswith("\r\n") else raw[1:] if raw.startswith("\n") else raw
    return raw[:-2] if raw.endswith("\r\n") else raw[:-1] if raw.endswith("\n") else raw


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def check_params(params: dict[str, str], spec: ToolSpec) -> None:
    """Required parameters given, allowed values kept (both call formats check a call this way)."""
    missing = [p.name for p in spec.params if p.required and p.name not in params]
    if missing:
        raise FormatError(bad(f"{spec.name} needs the parameter(s) {', '.join(missing)}"))
    for p in spec.params:
        if p.choices and p.name in params and params[p.name] not in p.choices:
            choices = ", ".join(p.choices)
            raise FormatError(bad(f"'{params[p.name]}' is not a valid {p.name} for {spec.name}; use one of {choices}"))
