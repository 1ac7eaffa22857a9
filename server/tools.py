"""OpenAI tool calling over a model's own chat template: the request's `tools` and `tool_choice` checked, the tools
rendered by the template (transformers' apply_chat_template(tools=...)), the reply's calls parsed from the model's
native syntax, and the grammars that constrain decoding (kvstore.session.grammar): a forced call (tool_choice
"required" or named) and JSON (response_format json_object / json_schema).

The native syntax is Hermes/Qwen's, which Qwen2.5/Qwen3's templates teach the model (and the fallback tool template,
kvstore.session.tools_fallback, for a model whose template has no tool support, e.g. SmolLM2's):

    <tool_call>
    {"name": "bash", "arguments": {"command": "ls"}}
    </tool_call>

A reply may hold text before its calls, and several calls.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any

from server import limits
from server.config import ServeError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.DOTALL)
CHOICES = ("none", "auto", "required")
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # OpenAI's rule for function names


def check_tools(tools: object) -> list[dict[str, Any]] | None:
    """The request's `tools` as OpenAI defines them (function tools only, each name once), or None when absent or
    empty."""
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise ServeError("'tools' must be a list of {'type': 'function', 'function': {...}} objects")
    out, seen = [], {}  # seen: each name's first index
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise ServeError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., ...}}}}")
        if not isinstance(fn.get("name"), str) or not NAME.fullmatch(fn["name"]):
            raise ServeError(f"tools[{i}].function.name must be 1-64 letters, digits, _ . or -")
        if fn["name"] in seen:  # a call names its tool: two of one name leave the call's schema ambiguous
            raise ServeError(
                f"tools[{i}].function.name {fn['name']!r} is a duplicate: tools[{seen[fn['name']]}] has that name; "
                "each tool needs a name of its own"
            )
        seen[fn["name"]] = i
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ServeError(f"tools[{i}].function.parameters must be a JSON schema object")
        limits.check_schema(params, f"tools[{i}].function.parameters")
        if "description" in fn and not isinstance(fn["description"], str):
            raise ServeError(f"tools[{i}].function.description must be a string")
        out.append({"type": "function", "function": {**fn, "parameters": params}})
    return out


def check_choice(choice: object, tools: list[dict] | None) -> str:
    """`tool_choice` as "none" | "auto" | "required" | the name of the one function the reply must call."""
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, str) and choice in CHOICES:
        if choice == "required" and not tools:
            raise ServeError("tool_choice 'required' needs 'tools'")
        return choice
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(name, str):
        raise ServeError(
            "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}"
        )
    if name not in names(tools or []):
        raise ServeError(f"tool_choice names function {name!r}, which is not among 'tools'")
    return name


def names(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def digest(tools: list[dict] | None) -> str:
    """A short fingerprint of the tools a conversation was rendered with ("" for none)."""
    if not tools:
        return ""
    return hashlib.sha256(json.dumps(tools, sort_keys=True).encode()).hexdigest()[:16]


def parse_reply(text: str, first_only: bool = False) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) of a reply in the native syntax: the text outside the calls (None when empty) and
    OpenAI's call objects. A reply whose calls do not all parse is plain content, with no calls. `first_only`
    (parallel_tool_calls false): the reply ends at its first call; what follows it is dropped, calls included."""
    first = CALL.search(text) if first_only else None
    text = text[: first.end()] if first is not None else text
    calls = []
    for body in CALL.findall(text):
        try:  # the model's text is untrusted too: it may nest 1,000 levels deep (limits)
            call = limits.loads(body, "a tool call")
            args = call.get("arguments", call.get("parameters", {})) if isinstance(call, dict) else None
            args = limits.loads(args, "its arguments") if isinstance(args, str) else args
        except ServeError:
            return text, []
        if not isinstance(call.get("name") if isinstance(call, dict) else None, str) or not isinstance(args, dict):
            return text, []
        calls.append(tool_call(call["name"], json.dumps(args, ensure_ascii=False)))
    if not calls:
        return text, []
    content = CALL.sub("", text).strip()
    return content or None, calls


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    """One OpenAI tool call (a fresh id "call_..."; `arguments` a JSON string)."""
    function = {"name": name, "arguments": arguments}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}


def call_schema(tools: list[dict], choice: str) -> dict[str, Any]:
    """The JSON schema of one call's object ({"name", "arguments"}) that `choice` allows: any tool ("required") or
    the one named."""
    allowed = [t["function"] for t in tools if choice == "required" or t["function"]["name"] == choice]
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": fn["name"]}, "arguments": fn["parameters"]},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for fn in allowed
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def constraint_spec(response_format: object, tools: list[dict] | None, choice: str) -> tuple[str, Any] | None:
    """What decoding must follow, as (kind, schema) for make_constraint: one call of the allowed tools ("tool_call":
    tool_choice required or named), or JSON ("json_schema": response_format json_object / json_schema); None: free."""
    fmt = _response_format(response_format)
    forced = choice not in ("none", "auto")
    if forced and fmt is not None:
        raise ServeError("response_format json_object/json_schema cannot be combined with a forced tool_choice")
    if forced:
        return "tool_call", call_schema(tools or [], choice)
    return None if fmt is None else ("json_schema", fmt)


def _response_format(fmt: object) -> dict[str, Any] | None:
    """The JSON schema a response_format asks for (None: free text)."""
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else fmt
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    spec = fmt.get("json_schema") if kind == "json_schema" else None
    if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
        raise ServeError(
            "response_format must be {'type': 'text'}, {'type': 'json_object'} or {'type': 'json_schema', "
            "'json_schema': {'name': ..., 'schema': {...}}}"
        )
    limits.check_schema(spec.get("schema"), "response_format.json_schema.schema")
    return spec.get("schema") or {"type": "object"}


def call_grammar(schema: dict[str, Any], tokenizer) -> str:
    """A Lark grammar (llguidance's dialect) of a reply that is exactly one call in the native syntax, the call's
    object following `schema` (call_schema). The tags are the tokenizer's own tokens where it has them (Qwen's
    <tool_call> is one added token, which llguidance does not take as text)."""
    call = json.dumps(compact(schema))
    return f'start: {_tag(OPEN, tokenizer)} "\\n" call "\\n" {_tag(CLOSE, tokenizer)}\ncall: %json {call}\n'


def compact(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` whose JSON is written as json.dumps writes it (", " and ": ", no other whitespace): free whitespace
    would let a weak model pad a call with spaces to its token limit."""
    spacing = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    return schema | {"x-guidance": spacing | schema.get("x-guidance", {})}


def _tag(text: str, tokenizer) -> str:
    token = getattr(tokenizer, "added_tokens_encoder", {}).get(text)
    return json.dumps(text) if token is None else f"<[{token}]>"
